"""Waiting for a decision: the wait loop (:func:`await_decision`), and each loop's hub.

A wait registers with its event loop's :class:`~approvals.services.waiter_hub.WaiterHub`
before it reads the row (so a decision in between is not missed), then waits on the
hub holding no thread, no connection and not the action itself, and reads the row
again only when woken. :func:`shutdown` answers every open wait at once (SIGTERM).
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import Awaitable, Callable

from django.conf import settings
from django.utils import timezone

from plumbing import db_threads, metrics

from ..models import Action, Agent
from .selectors import get_action_for_agent
from .waiter_hub import LINGER_S, Via, WaiterHub, Watch, settled_among

__all__ = [
    "LINGER_S",
    "answer_lane",
    "ProgressCallback",
    "WaiterHub",
    "Watch",
    "await_decision",
    "hub",
    "settled_among",
    "shutdown",
    "shutting_down",
    "waiting",
]


_hubs: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, WaiterHub] = weakref.WeakKeyDictionary()


def hub() -> WaiterHub:
    """This event loop's hub (one per process under daphne; one per test loop in tests)."""
    loop = asyncio.get_running_loop()
    found = _hubs.get(loop)
    if found is None or (found.closing and not shutting_down()):
        found = _hubs[loop] = WaiterHub(loop)
    return found


_shutdown_at: float | None = None


def shutting_down() -> bool:
    return _shutdown_at is not None


def shutdown() -> int:
    """Answer every open wait of the process now (SIGTERM); returns how many were woken."""
    global _shutdown_at
    _shutdown_at = time.monotonic()
    woken = 0
    for found in list(_hubs.values()):
        woken += found.waiting
        found.close()
    return woken


def waiting() -> int:
    return sum(found.waiting for found in _hubs.values())


# --- The wait loop ------------------------------------------------------------------------


ProgressCallback = Callable[[float], Awaitable[None]]


# Only the read a wake asks for runs on the "wake" lane: a burst of waits sent again
# (their first reads, and the last reads of those timing out) queued there ahead of
# the woken waiters' reads, and the decision reached its agent late.
_read = db_threads.wrap(get_action_for_agent, lane="work")
_read_woken = db_threads.wrap(get_action_for_agent, lane="wake")


def answer_lane(action: Action) -> str:
    """The database lane a wait's answer is written on: "wake" only for a decision.

    A burst of waits timing out answers ``pending`` by the thousand; on the "wake" lane
    those answers would queue ahead of the reads and answers of waiters a decision woke.
    """
    return "wake" if action.is_settled else "work"


async def await_decision(
    action_id: str,
    *,
    agent: Agent,
    timeout_s: float,
    on_progress: ProgressCallback | None = None,
    progress_every_s: float = 10.0,
) -> Action:
    """Wait until the action is no longer pending, or ``timeout_s`` passes.

    1. Register with the process's waiter hub (before reading, so a decision
       that lands in between is not missed).
    2. Read the row once: the row is the truth, messages are only hints.
    3. Wait on the hub, holding no thread and no connection: it wakes us on
       a channel-layer message, on its batched re-read, or on shutdown; read
       the row again only when woken.
    The final answer is read once more at the end, unless the wake's read is
    that answer. On shutdown the wait answers at once (``pending`` unless it
    was decided) so the agent asks again, possibly another process.
    """
    timeout_s = max(0.0, min(float(timeout_s), float(settings.IMPRI_MAX_AWAIT_S)))
    started = time.monotonic()
    deadline = started + timeout_s
    next_progress = started + progress_every_s
    action: Action | None
    async with hub().watch(action_id) as watch:
        action = await _read(action_id, agent)
        settled_while_waiting = not action.is_settled
        woken_by: Via | None = None  # who woke the read that found the decision, if a wake did
        expires_at = action.expires_at
        while action is None or not action.is_settled:  # None: still pending, not held
            # A pending action is not held while it is waited on (its payload and preview
            # are most of what a wait would keep): the answer is read again at the end.
            action = None
            now = time.monotonic()
            if now >= deadline:
                break
            if on_progress is not None and now >= next_progress:
                await on_progress(now - started)
                next_progress = now + progress_every_s
            step = min(deadline, next_progress if on_progress else deadline) - now
            # Expiry needs no sweep to be seen: wake at it and answer expired.
            until_expiry = (expires_at - timezone.now()).total_seconds()
            why = await watch.wait(min(step, max(0.0, until_expiry) + 0.01))
            if why == "changed":
                woken_by = watch.via
                action = await _read_woken(action_id, agent)
                expires_at = action.expires_at
            elif why == "shutdown":
                break
            elif expires_at <= timezone.now():
                # Overdue while we waited: the row says pending, a reader sees expired.
                break
    if action is None or not action.is_settled:
        action = await _read(action_id, agent)
    if settled_while_waiting and action.is_settled and action.decision_at is not None:
        metrics.observe_wake((timezone.now() - action.decision_at).total_seconds())
        if woken_by is not None and action.decided_at is not None:
            # A wake that brought a decision (not our own timer's expiry, nor the last read
            # at our timeout): by the push, or by the safety net.
            metrics.count_wake(woken_by)
    return action
