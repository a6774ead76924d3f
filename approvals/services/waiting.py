"""Waiting for a decision: the wait loop (:func:`await_decision`) and what it asks the rows.

A wait registers with a hub (``waiting.hub``: the mechanism, passed in by the adapter
that waits) before it reads the row (so a decision in between is not missed), then
waits on the hub holding no thread, no connection and not the action itself, and
reads the row again only when woken. The rules are here: how long a wait may last, when
an action counts as decided or overdue, which watched actions are no longer pending.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Literal, Protocol

from django.conf import settings
from django.utils import timezone

from plumbing import metrics
from plumbing.database import database_sync_to_async

from ..errors import Forbidden
from ..models import Action, ActionStatus, Agent
from .selectors import get_action_for_agent

__all__ = ["ProgressCallback", "Watch", "answer_lane", "await_decision", "settled_among", "waiter"]

# Without timeout_s a decision request waits this long (an agent's HTTP client
# usually allows 60 s; the answer is "pending" after it: call again). The REST route's
# default and the long-poll's.
DEFAULT_AWAIT_S = 30.0


def waiter(agent: Agent | None) -> Agent:
    """The agent a key names, who may wait; a reviewer's key may not (403)."""
    if agent is None:
        raise Forbidden("only the agent that pushed an action can await its decision")
    return agent


Wake = Literal["changed", "timeout", "shutdown"]


class Watch(Protocol):
    """One waiter's registration with a hub: ``wait`` says why it woke, ``via`` who woke it."""

    via: Literal["push", "reread"]

    async def wait(self, seconds: float) -> Wake: ...


WatchFor = Callable[[str], AbstractAsyncContextManager[Watch]]


# --- The wait loop ------------------------------------------------------------------------


ProgressCallback = Callable[[float], Awaitable[None]]

_read = database_sync_to_async(get_action_for_agent)
# The read a wake asks for, on its own lane: a burst of waits sent again (their first reads,
# the last reads of those timing out) never delays telling an agent its decision.
_read_woken = database_sync_to_async(get_action_for_agent, lane="wake")


def answer_lane(action: Action) -> str:
    """The lane a wait's answer is written on: "wake" only for a decision."""
    return "wake" if action.is_settled else "work"


async def await_decision(
    action_id: str,
    *,
    agent: Agent,
    timeout_s: float,
    watch: WatchFor,
    on_progress: ProgressCallback | None = None,
    progress_every_s: float = 10.0,
) -> Action:
    """Wait until the action is no longer pending, or ``timeout_s`` passes.

    1. Register with the hub (``watch(action_id)``, before reading, so a decision
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
    async with watch(action_id) as watching:
        action = await _read(action_id, agent)
        settled_while_waiting = not action.is_settled
        woken_by: str | None = None  # who woke the read that found the decision, if a wake did
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
            why = await watching.wait(min(step, max(0.0, until_expiry) + 0.01))
            if why == "changed":
                woken_by = watching.via
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


# The batched re-read's chunk: watched ids asked about in one query.
BATCH = 1000


def settled_among(ids: list[str]) -> list[str]:
    """Which of ``ids`` are no longer pending as a reader sees it (decided, or overdue)."""
    now = timezone.now()
    settled: list[str] = []
    for start in range(0, len(ids), BATCH):
        chunk = ids[start : start + BATCH]
        still = set(
            Action.objects.filter(
                pk__in=chunk, status=ActionStatus.PENDING, expires_at__gt=now
            ).values_list("pk", flat=True)
        )
        settled += [action_id for action_id in chunk if action_id not in still]
    return settled
