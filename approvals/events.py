"""Telling waiters that an action changed: channel-layer groups, after commit.

Messages are hints, never the truth: a woken waiter re-reads the row, and the
waiter hub (``waiting.hub``) re-reads every watched action in one batched
query each interval. So a message lost to a full channel or a Redis outage
costs at most one re-read interval, never a wrong answer.
"""

from __future__ import annotations

import asyncio
import logging
import weakref

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction
from django.dispatch import Signal

from plumbing import fallbacks

logger = logging.getLogger(__name__)

LAYER_CALL_TIMEOUT_S = 2.0


# The ``CHANNEL_LAYERS`` alias the waiter hub (``waiting.hub``) listens on for its wake-ups:
# an action's group gets its messages there; the inboxes' groups stay on ``default``.
WAKE_LAYER = "waiting"
ACTION_GROUP_PREFIX = "action."


def action_group(action_id: str) -> str:
    return f"{ACTION_GROUP_PREFIX}{action_id}"


# Reviewers' inboxes listen per review group; superusers see every group.
INBOX_ALL_GROUP = "inbox.all"


def inbox_group(review_group_id: int | None) -> str:
    return f"inbox.group.{review_group_id}" if review_group_id else "inbox.unrouted"


# Sent by publish_on_commit inside the change's transaction (``action=``, ``event=``), so a
# listener's outbox rows (the Slack app's messages, slackapp.delivery) commit with the change.
action_changed = Signal()


def publish_on_commit(action, event: str, *, also_review_group_ids=(), new: bool = False) -> None:
    """After commit, tell the action's waiters and the inboxes that can see it.

    ``also_review_group_ids`` names groups that could see the action before this
    change (an escalation moves it), so their open queues drop it too. ``new``: the
    action was created in this transaction, so it has no waiters to tell.
    """
    action_changed.send(sender=type(action), action=action, event=event)
    message = {
        "type": "action.update",
        "action_id": action.pk,
        "status": action.status,
        "event": event,
    }
    inbox_message = inbox_update(action, event)
    group_ids = {action.review_group_id, *also_review_group_ids}
    groups = [inbox_group(pk) for pk in sorted(group_ids, key=str)] + [INBOX_ALL_GROUP]

    sends = [(group, inbox_message) for group in groups]
    if not new and event != "action.pushed":  # nobody waits on an action before it exists
        sends.insert(0, (action_group(action.pk), message))
    transaction.on_commit(lambda: publish_many(sends))


# The loop that serves requests (set by impri.asgi on the first request). A
# commit in a worker thread hands its messages to this loop and returns: the
# request never waits for Redis, and a Redis that is away costs it nothing.
serving_loop: asyncio.AbstractEventLoop | None = None


def publish_many(sends: list[tuple[str, dict]]) -> None:
    """Send each ``(group, message)``; from a thread of a serving process, without waiting.

    An action's group goes to the waiters' layer (``WAKE_LAYER``), the rest to ``default``.
    """
    layer = get_channel_layer()
    wake_layer = get_channel_layer(WAKE_LAYER)
    wakes = [(g, m) for g, m in sends if g.startswith(ACTION_GROUP_PREFIX)]
    sends = [(g, m) for g, m in sends if not g.startswith(ACTION_GROUP_PREFIX)]
    if wake_layer is None:
        wakes = []
    if layer is None:
        sends = []
    loop = serving_loop
    if loop is not None and loop.is_running() and not _in_loop(loop):
        urgent = [(g, m) for g, m in sends if m.get("type") != INBOX_UPDATE]
        routine = [(g, m) for g, m in sends if m.get("type") == INBOX_UPDATE]
        if wakes:  # waiters go at once
            loop.call_soon_threadsafe(_spawn, loop, _send_all(wake_layer, wakes))
        if urgent:  # socket closes too
            loop.call_soon_threadsafe(_spawn, loop, _send_all(layer, urgent))
        if routine:
            loop.call_soon_threadsafe(_coalesce, loop, layer, routine)
        return
    try:
        if wakes:
            async_to_sync(_send_all)(wake_layer, wakes)
        if sends:
            async_to_sync(_send_all)(layer, sends)
    except Exception as exc:  # never raised in practice: _send_all notes its failures
        fallbacks.note("channel_layer", "waiters learn of changes by the re-read", exc)


def _in_loop(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


_background: set[asyncio.Task] = set()


def _spawn(loop: asyncio.AbstractEventLoop, coro) -> None:
    task = loop.create_task(coro)
    _background.add(task)  # keep a reference until it is done
    task.add_done_callback(_background.discard)


# Inbox rows are refreshed in batches: every update queued in a serving process
# within this window goes to each inbox group as one message ("inbox.batch"),
# so a burst of pushes costs each group a few channel-layer calls a second, not
# one per push. A waiter's wake-up (the action's own group) is never delayed.
INBOX_COALESCE_S = 0.05
INBOX_BATCH_MAX = 100
INBOX_UPDATE = "inbox.update"
_queued: dict[asyncio.AbstractEventLoop, dict[str, list[dict]]] = {}


def _coalesce(loop: asyncio.AbstractEventLoop, layer, sends: list[tuple[str, dict]]) -> None:
    """Queue inbox updates (on the serving loop); the first one schedules the flush."""
    queued = _queued.get(loop)
    if queued is None:
        queued = _queued[loop] = {}
        loop.call_later(INBOX_COALESCE_S, _flush, loop, layer)
    for group, message in sends:
        queued.setdefault(group, []).append(message)


def _flush(loop: asyncio.AbstractEventLoop, layer) -> None:
    queued = _queued.pop(loop, {})
    sends = []
    for group, messages in queued.items():
        for start in range(0, len(messages), INBOX_BATCH_MAX):
            chunk = messages[start : start + INBOX_BATCH_MAX]
            batch = {"type": "inbox.batch", "updates": chunk}
            sends.append((group, chunk[0] if len(chunk) == 1 else batch))
    if sends:
        _spawn(loop, _send_all(layer, sends))


async def _send_all(layer, sends: list[tuple[str, dict]]) -> None:
    results = await asyncio.gather(
        *(_send(layer, group, message) for group, message in sends), return_exceptions=True
    )
    failed = [r for r in results if isinstance(r, BaseException)]
    if failed:
        # The change is committed; waiters learn it from the hub's batched re-read.
        fallbacks.note("channel_layer", "waiters learn of changes by the re-read", failed[0])


def inbox_update(action, event: str) -> dict:
    """What an open inbox needs to place, refresh or remove a row without asking first.

    Built before commit from the object the service already holds (it reads no
    row the service did not load), so publishing costs no query after commit.
    """
    return {
        "type": INBOX_UPDATE,
        "action_id": action.pk,
        "status": action.status,
        "event": event,
        "review_group_id": action.review_group_id,
        "created_at": action.created_at.isoformat(),
        "expires_at": action.expires_at.isoformat(),
        "decided_at": action.decided_at.isoformat() if action.decided_at else None,
        "decided_by": _decided_by(action),
    }


def _decided_by(action) -> dict | None:
    try:
        return action.decided_by
    except Exception:
        # A partially loaded object must never stop the publish; the inbox re-reads on demand.
        logger.warning("could not name who decided %s", action.pk, exc_info=True)
        return None


def publish(group: str, message: dict) -> None:
    publish_many([(group, message)])


async def _send(layer, group: str, message: dict) -> None:
    async with layer_slot():
        await asyncio.wait_for(layer.group_send(group, message), LAYER_CALL_TIMEOUT_S)


# Concurrent channel-layer calls per event loop. redis-py refuses a 101st
# connection from one pool ("Too many connections"); a burst of pushes and a
# thousand agents arriving at once queue here instead.
LAYER_CONCURRENCY = 32
_slots: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
    weakref.WeakKeyDictionary()
)


def layer_slot() -> asyncio.Semaphore:
    loop = asyncio.get_running_loop()
    slot = _slots.get(loop)
    if slot is None:
        slot = _slots[loop] = asyncio.Semaphore(LAYER_CONCURRENCY)
    return slot
