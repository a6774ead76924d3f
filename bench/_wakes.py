"""How each wake of ``bench/waiters.py`` reached its waiter: push, re-read, or its own read.

Two sources, both optional:

- the probe's events (``--probe``, bench/_probe/sitecustomize.py): per action, when the
  hub woke its waiters and who called the wake (the receiver of channel-layer messages:
  ``push``; the safety net's batched re-read: ``reread``), when its wake-up message was
  sent, plus the serving loop's lag, the re-read passes and the group joins and leaves;
- the servers' ``/metrics``: ``impri_wakes_total{via=...}`` before and after the approvals.

A woken waiter whose action the hub never woke after the decision was answered by a read
of its own: the first read of a (re-)poll that began after the decision, or the last read
of a poll that timed out (``read``).
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict

import httpx

from bench._live import percentile, summary_ms

WAKES_LINE = re.compile(r'^impri_wakes_total\{via="(\w+)"\}\s+([0-9.e+]+)', re.M)


def scrape_wakes(urls: list[str], token: str) -> dict[str, float] | None:
    """``impri_wakes_total`` by ``via``, summed over the servers; None when no server has it."""
    total: Counter = Counter()
    found = False
    for url in urls:
        try:
            text = httpx.get(
                url + "/metrics", headers={"Authorization": f"Bearer {token}"}, timeout=10
            ).text
        except httpx.HTTPError:
            continue
        for via, value in WAKES_LINE.findall(text):
            total[via] += float(value)
            found = True
    return dict(total) if found else None


def _ms(values: list[float]) -> dict:
    return summary_ms(values)


def attribute(waiters, events: list[dict]) -> dict:
    """Per-wake attribution and the path's segments, from the probe's events."""
    wakes: dict[str, list[dict]] = defaultdict(list)
    sends: dict[str, list[float]] = defaultdict(list)
    answered: dict[str, list[float]] = defaultdict(list)
    for e in events:
        if e["k"] == "wake" and e.get("why") == "changed":
            wakes[e["a"]].append(e)
        elif e["k"] == "send" and e.get("a"):
            sends[e["a"]].append(e["t"])
        elif e["k"] == "done":
            answered[e["a"]].append(e["t"])
    by_via: dict[str, list[float]] = defaultdict(list)
    segments: dict[str, list[float]] = defaultdict(list)
    per_wake = []
    for w in waiters:
        if w.arrived is None or w.approve_sent is None or w.decision_at is None:
            continue
        hub = next(
            (
                e
                for e in sorted(wakes.get(w.action_id, ()), key=lambda e: e["t"])
                if w.decision_at - 0.002 <= e["t"] <= w.arrived
            ),
            None,
        )
        via = hub["via"] if hub else "read"
        by_via[via].append(w.arrived - w.approve_sent)
        segments["approve sent → decided_at"].append(w.decision_at - w.approve_sent)
        sent = next((t for t in sorted(sends.get(w.action_id, ())) if t >= w.decision_at), None)
        if sent is not None:
            segments["decided_at → message sent"].append(sent - w.decision_at)
        done = next((t for t in sorted(answered.get(w.action_id, ())) if t >= w.decision_at), None)
        if done is not None:
            segments["server has the answer → client has it"].append(w.arrived - done)
        if hub is not None:
            if done is not None:
                segments[f"hub woke ({via}) → server has the answer"].append(done - hub["t"])
            if sent is not None and via == "push":
                segments["message sent → hub woke (push)"].append(hub["t"] - sent)
            segments[f"hub woke ({via}) → client has it"].append(w.arrived - hub["t"])
            segments[f"decided_at → hub woke ({via})"].append(hub["t"] - w.decision_at)
        per_wake.append(
            {
                "a": w.action_id,
                "sent": w.approve_sent,
                "decided": w.decision_at,
                "message": sent,
                "hub": hub["t"] if hub else None,
                "via": via,
                "arrived": w.arrived,
                "q": hub.get("q") if hub else None,
            }
        )
    return {
        "by_via": {via: _ms(values) for via, values in sorted(by_via.items())},
        "segments_ms": {name: _ms(values) for name, values in segments.items()},
        "per_wake": per_wake,
    }


def loop_health(events: list[dict], start: float, end: float) -> dict:
    """The serving loops' lag, the re-read passes and the group joins/leaves in [start, end]."""
    inside = [e for e in events if start <= e["t"] <= end]
    lags = [e["lag"] for e in inside if e["k"] == "lag"]
    rereads = [e for e in inside if e["k"] == "reread"]
    joins = [e["t"] - e["t0"] for e in inside if e["k"] == "join"]
    leaves = [e["t"] - e["t0"] for e in inside if e["k"] == "leave"]
    sends = [e["t"] - e["t0"] for e in inside if e["k"] == "send"]
    worst = sorted((e for e in inside if e["k"] == "lag"), key=lambda e: -e["lag"])[:5]
    return {
        "loop_lag_events_over_5ms": len(lags),
        "loop_lag_s_total": round(sum(lags), 3),
        "loop_lag_ms_p99_max": [
            round((percentile(lags, 99) or 0) * 1000, 1),
            round(max(lags, default=0) * 1000, 1),
        ],
        "worst_lags": [
            {"at_s": round(e["t"] - start, 2), "lag_ms": round(e["lag"] * 1000, 1), "q": e.get("q")}
            for e in worst
        ],
        "rereads": len(rereads),
        "reread_settled": sum(e["settled"] for e in rereads),
        "reread_ms": _ms([e["t"] - e["t0"] for e in rereads]),
        "joins": len(joins),
        "join_ms": _ms(joins),
        "leaves": len(leaves),
        "leave_ms": _ms(leaves),
        "wake_sends": len(sends),
        "wake_send_ms": _ms(sends),
    }


def timeline(
    per_wake: list[dict],
    events: list[dict],
    start: float,
    repolls: list[float] = (),
    client_lags: list[tuple[float, float]] = (),
    bucket: float = 5.0,
) -> list:
    """Per ``bucket`` seconds of the approvals: wakes, their p99 from approve sent, re-read
    wakes, waits sent again, group joins, and the loop's total lag: where the tail sits."""
    rows: dict[int, dict] = defaultdict(
        lambda: {
            "wakes": 0,
            "lat": [],
            "reread": 0,
            "read": 0,
            "repolls": 0,
            "joins": 0,
            "lag_ms": 0.0,
            "client_lag_ms": 0.0,
        }
    )
    for w in per_wake:
        row = rows[int((w["sent"] - start) // bucket)]
        row["wakes"] += 1
        row["lat"].append(w["arrived"] - w["sent"])
        if w["via"] in ("reread", "read"):
            row[w["via"]] += 1
    for t in repolls:
        i = int((t - start) // bucket)
        if t >= start and i in rows:
            rows[i]["repolls"] += 1
    for t, late in client_lags:
        i = int((t - start) // bucket)
        if t >= start and i in rows:
            rows[i]["client_lag_ms"] += late * 1000
    for e in events:
        if e["t"] < start:
            continue
        i = int((e["t"] - start) // bucket)
        if e["k"] == "join" and i in rows:
            rows[i]["joins"] += 1
        elif e["k"] == "lag" and i in rows:
            rows[i]["lag_ms"] += e["lag"] * 1000
    out = []
    for i in sorted(rows):
        row = rows[i]
        lat = row.pop("lat")
        out.append(
            {
                "from_s": i * bucket,
                **row,
                "lag_ms": round(row["lag_ms"]),
                "client_lag_ms": round(row["client_lag_ms"]),
                "p50_ms": round((percentile(lat, 50) or 0) * 1000, 1),
                "p99_ms": round((percentile(lat, 99) or 0) * 1000, 1),
            }
        )
    return out
