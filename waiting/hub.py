"""The waiter hub: every open wait of this process, woken by one receiver.

A wait costs a future, a timer and a set entry: no thread, no database
connection, no channel of its own. Per process (per event loop) the hub keeps

1. ``action id → waiters``; the first waiter of an action joins the
   channel-layer group ``action.<id>`` with the hub's one channel. When the
   last one goes the group stays joined for ``LINGER_S`` (an agent whose wait
   timed out asks again at once: it finds the group joined and costs the layer
   nothing), then the safety-net task leaves it, a few at a time, on slots of
   its own;
2. one receiver task that reads the hub's channel (``receive``, the layer's public
   API) and wakes the waiters of the action each message names (messages are hints:
   a woken waiter re-reads its row). The layer is the ``waiting`` alias of
   ``CHANNEL_LAYERS`` (``approvals.events.WAKE_LAYER``): under Redis channels_redis's
   documented ``RedisPubSubChannelLayer``, where a group is a Redis pub/sub channel,
   joining one is a ``SUBSCRIBE`` and a message is read from an in-process queue
   (fire and forget: a wake nobody hears is caught by the re-read below);
3. one safety-net task that, every ``IMPRI_AWAIT_REREAD_S``, asks the
   database in one batched query which of the watched actions are no longer
   pending (decided in a process the layer doesn't reach, a lost message,
   the layer down, an expiry nobody swept yet) and wakes those that no
   message woke within ``REREAD_GRACE_S``.

If the layer fails (Redis down), the receiver backs off and retries, the
safety net keeps answering every waiter, and once the layer answers again
the hub joins every group it watches anew (a restarted Redis comes back
empty). On shutdown every waiter is woken at once (``waiting.shutdown``) so
open long-polls answer ``pending`` and the agent asks again, elsewhere.

Why groups linger (issue 34): waits time out together and are sent again in
bursts. When each left its group (awaited before its ``pending`` answer) and
joined it again, their layer calls queued by the thousand for the channel-layer
slots that wake-up messages need too: the re-read woke those waiters first,
seconds late (docs/benchmarks.md, "Wake tail under load"). Now a wait sent
again makes no layer call, and no answer waits for one. Each wake that brings
a decision is counted by how it came (``impri_wakes_total{via=...}``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import re
import time
import weakref
from contextlib import asynccontextmanager
from typing import Literal

from channels.layers import get_channel_layer
from django.conf import settings

from approvals.events import WAKE_LAYER, action_group, layer_slot
from approvals.services import settled_among
from plumbing import fallbacks
from plumbing.database import database_sync_to_async

logger = logging.getLogger(__name__)

LAYER_CALL_TIMEOUT_S = 2.0
# A group stays joined this long after its last waiter went (an agent's next call).
LINGER_S = 30.0
# A decision the re-read finds is left this long to its message before the re-read wakes
# its waiters (at most half the interval): a push on its way still counts as a push, and
# impri_wakes_total{via="reread"} counts only what the messages missed.
REREAD_GRACE_S = 0.5
# Concurrent group_discard calls of the lingering groups' sweep: on slots of the hub's
# own, so a sweep of thousands never delays a wake-up message (those use layer_slot).
LEAVE_CONCURRENCY = 4
PROBE_GROUP = "impri.hub.probe"
# What channels accepts as a group name (``BaseChannelLayer.require_valid_group_name``).
GROUP_NAME = re.compile(r"[a-zA-Z0-9\-_.]{1,99}")
BACKOFF_MAX_S = 5.0

Wake = Literal["changed", "timeout", "shutdown"]
Via = Literal["push", "reread"]


class Watch:
    """One waiter's registration: ``wait()`` returns why it woke, ``via`` who woke it."""

    __slots__ = ("action_id", "hub", "via", "_future")

    def __init__(self, hub: WaiterHub, action_id: str):
        self.hub = hub
        self.action_id = action_id
        self.via: Via = "reread"
        self._future: asyncio.Future | None = None

    def wake(self, why: Wake, via: Via = "push") -> None:
        if self._future is None:
            self._future = self.hub.loop.create_future()
        if not self._future.done():
            self.via = via
            self._future.set_result(why)

    async def wait(self, seconds: float) -> Wake:
        """Until woken or ``seconds`` pass; a wake that came in between calls counts at once.

        One future and one timer a wait: ``asyncio.wait`` would add a set, a second
        future and a callback per call, held for as long as the wait (issue 34: memory
        per waiting agent).
        """
        if self.hub.closing:
            return "shutdown"
        if self._future is None:
            self._future = self.hub.loop.create_future()
        future = self._future
        if not future.done():
            timer = self.hub.loop.call_later(max(0.0, seconds), _time_out, future)
            try:
                await future
            finally:
                timer.cancel()
        self._future = None
        return future.result()


def _time_out(future: asyncio.Future) -> None:
    if not future.done():
        future.set_result("timeout")


class WaiterHub:
    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.layer = get_channel_layer(WAKE_LAYER)
        self.watches: dict[str, set[Watch]] = {}
        self.channel: str | None = None
        self.closing = False
        self.layer_ok = self.layer is not None
        self._joined: set[str] = set()
        self._joins: dict[str, asyncio.Task] = {}
        # Groups joined with nobody waiting: action id → when its last waiter went.
        self._idle: dict[str, float] = {}
        self._leaving: dict[str, asyncio.Task] = {}
        self._leave_slots = asyncio.Semaphore(LEAVE_CONCURRENCY)
        self._tasks: list[asyncio.Task] = []
        self._rejoin: asyncio.Task | None = None
        self._started = False
        self._channel_lock = asyncio.Lock()
        self._layer_back = asyncio.Event()  # set when the re-read task finds the layer back
        self.rereads = 0

    # --- registration ---------------------------------------------------------

    @asynccontextmanager
    async def watch(self, action_id: str):
        """Register a waiter for ``action_id`` for the duration of the block."""
        self._start()
        watch = Watch(self, action_id)
        if action_id not in self.watches:
            self._idle.pop(action_id, None)  # a lingering group is still joined
            join = self._joins.get(action_id)
            # A group being left is not joined: join it again once the leave has landed.
            joined = action_id in self._joined and action_id not in self._leaving
            if not joined and (join is None or join.done()):
                join = self._joins[action_id] = self.loop.create_task(self._join(action_id))
                # A join that landed is forgotten: ``_joined`` says the group is joined,
                # and a done task kept per lingering group is memory for nothing.
                join.add_done_callback(functools.partial(self._joined_done, action_id))
        self.watches.setdefault(action_id, set()).add(watch)
        linger = True
        try:
            # Every waiter of the action, not only the first, reads its row only
            # once the group is joined: a decision after that read is heard.
            join = self._joins.get(action_id)
            if join is not None:
                await asyncio.shield(join)
            yield watch
        except BaseException:
            linger = False  # cancelled (the client went away) or failed: nobody asks again soon
            raise
        finally:
            watchers = self.watches.get(action_id)
            if watchers is not None:
                watchers.discard(watch)
                if not watchers:
                    del self.watches[action_id]
                    if linger and not self.closing:
                        # No layer call: the answer goes out now, the group lingers.
                        self._idle[action_id] = time.monotonic()
                    else:
                        await asyncio.shield(self._start_leave(action_id))

    @property
    def waiting(self) -> int:
        return sum(len(w) for w in self.watches.values())

    def wake(self, action_id: str, why: Wake = "changed", via: Via = "push") -> int:
        watchers = self.watches.get(action_id, ())
        for watch in list(watchers):
            watch.wake(why, via)
        return len(watchers)

    # --- channel layer ------------------------------------------------------------

    async def _ensure_channel(self) -> bool:
        if self.layer is None:
            return False
        async with self._channel_lock:  # the receiver and the first join race here
            if self.channel is None:
                self.channel = await asyncio.wait_for(
                    self.layer.new_channel(), LAYER_CALL_TIMEOUT_S
                )
        return True

    def _groupable(self, action_id: str) -> bool:
        """Whether the layer takes the action's group name (no Impri id is refused).

        A name the layer refuses (an id of no action: ``é``, 100 characters) is no layer
        failure: it must not switch every waiter of the process to the re-read. Its wait
        ends at its first read (no such action), or the re-read answers it.
        """
        return self.layer is not None and GROUP_NAME.fullmatch(action_group(action_id)) is not None

    async def _join(self, action_id: str) -> None:
        if not self._groupable(action_id):
            return
        leaving = self._leaving.get(action_id)
        if leaving is not None:
            # The sweep is leaving this group: its group_discard must land before our
            # group_add, or it would undo the join.
            await asyncio.wait([leaving])
        if not self.layer_ok:
            return  # the receiver re-joins every watched group when the layer is back
        try:
            if await self._ensure_channel():
                async with layer_slot():
                    await asyncio.wait_for(
                        self.layer.group_add(action_group(action_id), self.channel),
                        LAYER_CALL_TIMEOUT_S,
                    )
                self._joined.add(action_id)
        except Exception as exc:
            self._layer_failed("join", exc)

    async def _leave(self, action_id: str, join: asyncio.Task | None = None) -> None:
        if join is not None and not join.done():
            # A waiter cancelled while its group_add is in flight: the group may be
            # joined only once that call returns, so leave after it, not before.
            await asyncio.wait([join])
        if action_id not in self._joined:
            return
        self._joined.discard(action_id)
        if not self.layer_ok:
            return
        try:
            async with self._leave_slots:
                await asyncio.wait_for(
                    self.layer.group_discard(action_group(action_id), self.channel),
                    LAYER_CALL_TIMEOUT_S,
                )
        except Exception as exc:
            _reraise_if_cancelled(exc)
            # Leaving is housekeeping: a group left joined only brings this process messages
            # for waits it no longer has, which wake() drops. One slow group_discard under
            # load must not send every waiter to the re-read (it did, for 6-23 s at 2,000
            # waits); a layer really away fails the receiver and the joins, which say so.
            fallbacks.note("channel_layer", "a group was not left; its messages are dropped", exc)

    def _start_leave(self, action_id: str) -> asyncio.Task:
        """Leave the group in a task of its own, which a new join of it waits for."""
        task = self.loop.create_task(self._leave(action_id, self._joins.pop(action_id, None)))
        self._leaving[action_id] = task
        task.add_done_callback(functools.partial(self._left, action_id))
        return task

    def _leave_idle(self, older_than_s: float = LINGER_S) -> list[asyncio.Task]:
        """Start leaving the groups nobody has waited on for ``older_than_s``."""
        cutoff = time.monotonic() - older_than_s
        stale = [a for a, since in self._idle.items() if since <= cutoff]
        for action_id in stale:
            del self._idle[action_id]
        return [self._start_leave(action_id) for action_id in stale]

    def _joined_done(self, action_id: str, task: asyncio.Task) -> None:
        if self._joins.get(action_id) is task:
            del self._joins[action_id]

    def _left(self, action_id: str, task: asyncio.Task) -> None:
        if self._leaving.get(action_id) is task:
            del self._leaving[action_id]

    def _layer_failed(self, what: str, exc: BaseException) -> None:
        if self.layer_ok:
            logger.warning(
                "channel layer unreachable (%s: %s); waiters are answered by the "
                "re-read every %ss until it is back",
                what,
                exc,
                settings.IMPRI_AWAIT_REREAD_S,
            )
        self.layer_ok = False
        # Lingering groups are forgotten, not left: the layer is away (a restarted Redis
        # has none), and a new waiter of one of them joins it again.
        for action_id in self._idle:
            self._joined.discard(action_id)
            self._joins.pop(action_id, None)
        self._idle.clear()

    async def _rejoin_all(self) -> None:
        """The layer is back (a restarted Redis is empty): join every watched group again."""
        await self._ensure_channel()
        # A real round trip even when nobody waits: the layer must answer before we say it's back.
        async with layer_slot():
            await asyncio.wait_for(
                self.layer.group_add(PROBE_GROUP, self.channel), LAYER_CALL_TIMEOUT_S
            )
            await asyncio.wait_for(
                self.layer.group_discard(PROBE_GROUP, self.channel), LAYER_CALL_TIMEOUT_S
            )
        # Every watched group, many at a time on the sweep's slots (thousands of joins one
        # after another took 20 s at 2,000 waits); then again for the waits that came while
        # they ran (their own join skipped the layer while it was away), until none is left.
        # Between the last look and layer_ok there is no await: no wait slips between them.
        rejoined: set[str] = set()
        while missing := [a for a in self.watches if a not in rejoined and self._groupable(a)]:
            await asyncio.gather(*(self._rejoin_one(action_id) for action_id in missing))
            rejoined.update(missing)
        self.layer_ok = True
        self._layer_back.set()
        logger.warning("channel layer reachable again; waiters wake by push")

    async def _rejoin_one(self, action_id: str) -> None:
        async with self._leave_slots:
            await asyncio.wait_for(
                self.layer.group_add(action_group(action_id), self.channel),
                LAYER_CALL_TIMEOUT_S,
            )
        self._joined.add(action_id)

    async def _try_rejoin(self) -> None:
        try:
            await self._rejoin_all()
        except Exception as exc:
            _reraise_if_cancelled(exc)
            self._layer_failed("rejoin", exc)

    async def _receive_loop(self) -> None:
        backoff = 0.2
        while not self.closing:
            try:
                await self._ensure_channel()
                message = await self.layer.receive(self.channel)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                _reraise_if_cancelled(exc)
                self._layer_failed("receive", exc)
                self._layer_back.clear()
                # Again after the backoff, or as soon as the layer is back: a restarted
                # Redis may already hold wake-ups for the hub (reads fail fast meanwhile).
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._layer_back.wait(), backoff)
                backoff = min(backoff * 2, BACKOFF_MAX_S)
                continue
            backoff = 0.2
            action_id = message.get("action_id")
            if isinstance(action_id, str):
                self.wake(action_id)

    # --- the safety net -----------------------------------------------------------

    async def _reread_loop(self) -> None:
        while not self.closing:
            await asyncio.sleep(settings.IMPRI_AWAIT_REREAD_S)
            self._leave_idle()
            if (
                self.layer is not None
                and not self.layer_ok
                and (self._rejoin is None or self._rejoin.done())
            ):
                # In a task of its own: the re-read below is the waits' only way to learn
                # of a decision while the layer is away, and must not wait for the joins.
                self._rejoin = self.loop.create_task(self._try_rejoin(), name="impri-hub-rejoin")
            ids = list(self.watches)
            if not ids:
                continue
            try:
                settled = await _settled_among(ids)
            except Exception:
                logger.warning("batched re-read of %d waits failed", len(ids), exc_info=True)
                continue
            self.rereads += 1
            if settled:
                grace = min(REREAD_GRACE_S, settings.IMPRI_AWAIT_REREAD_S / 2)
                self.loop.call_later(grace, self._wake_missed, settled)

    def _wake_missed(self, action_ids: list[str]) -> None:
        """Wake the waiters of decisions the re-read found and no message has woken since."""
        for action_id in action_ids:
            self.wake(action_id, via="reread")

    # --- life cycle -------------------------------------------------------------------

    def _start(self) -> None:
        if self._started or self.closing:
            return
        self._started = True
        if self.layer is not None:
            self._tasks.append(
                self.loop.create_task(self._receive_loop(), name="impri-hub-receive")
            )
        self._tasks.append(self.loop.create_task(self._reread_loop(), name="impri-hub-reread"))

    def close(self) -> None:
        """Wake every waiter with ``shutdown`` and stop the hub's tasks."""
        self.closing = True
        for action_id in list(self.watches):
            self.wake(action_id, "shutdown")
        self._leave_idle(older_than_s=-1.0)  # best effort: the process is about to end
        for task in self._tasks:
            task.cancel()
        if self._rejoin is not None:
            self._rejoin.cancel()


def _reraise_if_cancelled(exc: Exception) -> None:
    """A cancellation that a library below turned into another error is still a cancellation.

    A redis read cancelled mid-reply can surface as a connection error; caught as a layer
    failure, the loop would retry and outlive its cancel (a stop, a test loop's teardown)
    for ever. ``Task.cancelling()`` still counts the request, so it is honoured here.
    """
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError from exc


_settled_among = database_sync_to_async(settled_among, lane="wake")


# --- each event loop's hub ----------------------------------------------------------


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
    """How many waits are open in this process."""
    return sum(found.waiting for found in _hubs.values())
