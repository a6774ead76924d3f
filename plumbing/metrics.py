"""The process's Prometheus registry and the instruments code below the project writes to.

The collectors that read the database, and the ``/metrics`` view, are the
project's (``ops.metrics``); what an app observes as it runs (a waiter woken)
is recorded here, so no app imports the project.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

# Seconds from a decision to the waiting agent being answered: push wakes in
# milliseconds, the safety-net re-read in IMPRI_AWAIT_REREAD_S.
WAKE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)

registry = CollectorRegistry()

wake_seconds = Histogram(
    "impri_wake_seconds",
    "Per process: seconds from a decision to the waiting agent's answer (long-poll or MCP wait).",
    buckets=WAKE_BUCKETS,
    registry=registry,
)


def observe_wake(seconds: float) -> None:
    wake_seconds.observe(max(0.0, seconds))


# How each wake that brought a decision reached its wait: "push", a channel-layer message
# woke it; "reread", the waiter hub's batched safety-net re-read did. Re-read wakes should
# stay rare: many mean wake-up messages are late or lost (docs/benchmarks.md, issue 34).
wakes_total = Counter(
    "impri_wakes",
    "Per process: waits woken with their decision, by how it reached them (push: a "
    "channel-layer message; reread: the safety-net re-read).",
    labelnames=["via"],
    registry=registry,
)
for _via in ("push", "reread"):
    wakes_total.labels(via=_via)  # both series from the start, at 0


def count_wake(via: str) -> None:
    wakes_total.labels(via=via).inc()
