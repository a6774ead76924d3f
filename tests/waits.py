"""Waiting in tests for state something else changes: a liveness bound, never a timing.

A test about being *woken* must make its decision only once the waiter is
blocked; sleeping "long enough" only hopes so, and under load it may decide
first and test the initial read instead. These helpers wait for what shows it:

- in-process (:func:`parked`): the waiter's registration in this process's hub
  (``waiting.hub``) has reached ``Watch.wait``, which it does only after
  joining the action's group and reading the row once;
- against a live server (:func:`server_waiters`): the ``impri_waiters`` gauge
  on its ``/metrics`` (every :class:`tests.live.Deployment` sets
  ``IMPRI_METRICS_TOKEN``);
- over MCP: the first progress notification of the wait (sent from the wait
  loop, after the first read); see the tests that use it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import httpx
from prometheus_client.parser import text_string_to_metric_families


async def until(predicate: Callable[[], object], timeout: float = 5.0) -> None:
    """Until ``predicate()`` is true; fails after ``timeout`` seconds (a loaded CI machine is slow)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out waiting for the condition"
        await asyncio.sleep(0.01)


def eventually(predicate: Callable[[], object], timeout: float = 30.0, what: str = "the condition"):
    """Poll until ``predicate()`` answers something truthy and return it (blocking code)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


# --- in-process waiters -------------------------------------------------------------


def parked(action_id: str | None = None) -> int:
    """Waiters of this process (of ``action_id``, or all) blocked in the hub right now.

    A ``Watch`` gets its future the first time it waits, which ``await_decision``
    does only after the group join and its first read; until woken it is not done.
    A decision from then on can reach the waiter only by a wake.
    """
    from waiting import hub as waiting

    count = 0
    for hub in list(waiting._hubs.values()):
        for found_id, watches in list(hub.watches.items()):
            if action_id is not None and found_id != action_id:
                continue
            count += sum(
                1
                for watch in list(watches)
                if watch._future is not None and not watch._future.done()
            )
    return count


async def until_parked(action_id: str | None = None, count: int = 1, timeout: float = 10.0):
    """Until ``count`` waiters (of ``action_id``) are blocked in this process's hub."""
    await until(lambda: parked(action_id) >= count, timeout)


# --- live servers -------------------------------------------------------------------


def server_waiters(server) -> float:
    """The ``impri_waiters`` gauge of one live server process."""
    response = httpx.get(
        server.url + "/metrics",
        headers={"Authorization": f"Bearer {server.metrics_token}"},
        timeout=10,
    )
    assert response.status_code == 200, response.text
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            if sample.name == "impri_waiters":
                return sample.value
    raise AssertionError("no impri_waiters gauge on /metrics")


def until_server_waits(server, count: int = 1, timeout: float = 30.0) -> None:
    """Until the live server holds at least ``count`` open waits (REST long-polls, MCP waits)."""
    eventually(
        lambda: server_waiters(server) >= count, timeout, f"{count} waiter(s) on {server.url}"
    )


def until_server_idle(server, count: int = 0, timeout: float = 30.0) -> None:
    """Until the live server holds at most ``count`` open waits."""
    eventually(
        lambda: server_waiters(server) <= count,
        timeout,
        f"at most {count} waiter(s) on {server.url}",
    )
