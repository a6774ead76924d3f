"""Bench-only probe of a serve process (``bench/waiters.py --probe``); never shipped.

Put on ``PYTHONPATH`` of the Impri processes with ``IMPRI_BENCH_PROBE_DIR`` set, it
patches, from outside and once the modules are imported, the waiter hub and the
after-commit publish, and appends one JSON line per event to
``$IMPRI_BENCH_PROBE_DIR/probe-<pid>.jsonl``:

- ``wake``: the hub woke an action's waiters: ``via`` says who called it (``push``: the
  receiver, a channel-layer message; ``reread``: the safety net's batched re-read;
  ``shutdown``), with the waiters woken and the depth of the database lanes' queues;
- ``send``: an action's wake-up message went to the layer (``t0`` when the publish was
  handed to the loop's task, ``t`` when ``group_send`` returned, ``slot_waiting``: calls
  queued for a channel-layer slot when it started);
- ``reread``: one pass of the safety net (``ids`` watched, ``settled``, its duration);
- ``join`` / ``leave``: a group_add / group_discard of the hub and how long it took;
- ``lag``: the serving loop was late by ``lag`` seconds (a 10 ms timer, noted above 5 ms);
- ``done``: a wait (``approvals.services.await_decision``) returned a settled action: the
  server has the answer, and what follows is its writing and the client's reading.

Times are ``time.time()`` (the benchmark's clock on the same machine). It changes no
behaviour: every patched function calls the original. It costs two threads (one
exits once the modules appear; one writes the lines every half second) and a few
microseconds an event.
"""

from __future__ import annotations

import asyncio
import atexit
import json
import os
import sys
import threading
import time

_DIR = os.environ.get("IMPRI_BENCH_PROBE_DIR")
_lines: list[dict] = []


def _note(kind: str, **fields) -> None:
    # Kept in memory and written every half second (a write per event would add a
    # syscall to the loop's every step, and the probe would make the lag it measures).
    fields["k"] = kind
    fields.setdefault("t", time.time())
    _lines.append(fields)


def _flush() -> None:
    if not _lines:
        return
    batch = _lines[:]
    del _lines[: len(batch)]
    with open(os.path.join(_DIR, f"probe-{os.getpid()}.jsonl"), "a") as out:
        out.writelines(json.dumps(f, separators=(",", ":")) + "\n" for f in batch)


def _flusher() -> None:
    while True:
        time.sleep(0.5)
        _flush()


def _queues() -> dict:
    # The database lanes' module (its name moved once; either is fine).
    # (Gone with issue 41: database work runs through asgiref's sync_to_async, no lanes.)
    dbexec = sys.modules.get("plumbing.db_threads") or sys.modules.get("approvals." + "dbexec")
    out = {}
    for lane, pool in getattr(dbexec, "_executors", {}).items():
        out[lane] = pool._work_queue.qsize()
    return out


def _slot_waiting() -> int:
    events = sys.modules.get("approvals.events")
    try:
        slot = events._slots.get(asyncio.get_running_loop())
    except (AttributeError, RuntimeError):
        return -1
    waiters = getattr(slot, "_waiters", None) if slot is not None else None
    return len(waiters) if waiters else 0


async def _lag_monitor() -> None:
    step = 0.01
    while True:
        before = time.monotonic()
        await asyncio.sleep(step)
        late = time.monotonic() - before - step
        if late > 0.005:
            _note("lag", lag=round(late, 4), q=_queues())


def _patch_waiting(waiting) -> None:
    hub_class = waiting.WaiterHub
    wake, init = hub_class.wake, hub_class.__init__
    join, leave = hub_class._join, hub_class._leave
    settled_among = waiting.settled_among
    callers = {"_receive_loop": "push", "_reread_loop": "reread", "close": "shutdown"}

    def probed_init(self, loop):
        init(self, loop)
        loop.create_task(_lag_monitor())

    def probed_wake(self, action_id, why="changed", *args, **kwargs):
        n = wake(self, action_id, why, *args, **kwargs)
        caller = sys._getframe(1).f_code.co_name
        via = kwargs.get("via") or callers.get(caller, caller)
        if n:
            _note("wake", a=action_id, via=via, why=why, n=n, q=_queues())
        return n

    async def probed_join(self, action_id):
        t0 = time.time()
        try:
            return await join(self, action_id)
        finally:
            _note("join", t0=t0, a=action_id)

    async def probed_leave(self, action_id, *args, **kwargs):
        t0 = time.time()
        try:
            return await leave(self, action_id, *args, **kwargs)
        finally:
            _note("leave", t0=t0, a=action_id)

    def probed_settled_among(ids):
        t0 = time.time()
        settled = settled_among(ids)
        _note("reread", t0=t0, ids=len(ids), settled=len(settled))
        return settled

    hub_class.__init__ = probed_init
    hub_class.wake = probed_wake
    hub_class._join = probed_join
    hub_class._leave = probed_leave
    waiting.settled_among = probed_settled_among
    # Since the hub has a module of its own, its safety net looks the function up there.
    hub_module = sys.modules.get("approvals.services.waiter_hub") or sys.modules.get("waiting.hub")
    if hub_module is not None:
        hub_module.settled_among = probed_settled_among


def _patch_services(services) -> None:
    await_decision = services.await_decision

    async def probed_await_decision(action_id, *args, **kwargs):
        action = await await_decision(action_id, *args, **kwargs)
        if action.is_settled:
            _note("done", a=action_id)
        return action

    services.await_decision = probed_await_decision


def _patch_events(events) -> None:
    send_all = events._send_all

    async def probed_send_all(layer, sends):
        t0 = time.time()
        slot = _slot_waiting()
        try:
            return await send_all(layer, sends)
        finally:
            for group, message in sends:
                if group.startswith("action."):
                    _note("send", t0=t0, a=message.get("action_id"), slot_waiting=slot)

    events._send_all = probed_send_all


def _watch_imports() -> None:
    todo = {
        "waiting.hub": (_patch_waiting, "waiting"),  # the hub's module since issue 41
        "approvals.services": (_patch_services, "__all__"),
        "approvals.events": (_patch_events, "layer_slot"),
    }
    while todo:
        for name in list(todo):
            module = sys.modules.get(name)
            # Patch only once the module has finished executing (its last name is bound).
            if module is not None and hasattr(module, todo[name][1]):
                todo.pop(name)[0](module)
        time.sleep(0.02)


if _DIR:
    atexit.register(_flush)
    threading.Thread(target=_watch_imports, name="bench-probe", daemon=True).start()
    threading.Thread(target=_flusher, name="bench-probe-flush", daemon=True).start()
