"""Database work from async code: asgiref's ``sync_to_async``, on bounded threads when serving.

``database_sync_to_async(fn)`` is asgiref's ``sync_to_async`` with its documented
arguments, chosen by where it is awaited:

- on the serving loop (daphne's, marked by ``impri.asgi`` with :func:`serving_on`): the call
  runs on a small bounded executor (``thread_sensitive=False, executor=...``), 8 threads,
  and 4 more for the reads a wake-up asks for (``lane="wake"``: a woken agent's read and
  its answer). Measured (docs/benchmarks.md, "Stock parts"): on the process's one shared
  sync thread, ``sync_to_async``'s thread-sensitive default outside a request, woken agents
  at 2,000 waiters waited seconds behind the re-polls' reads; a ``ThreadSensitiveContext``
  a call (a thread created and joined each time) slowed every request of the process;
- anywhere else (a sync caller blocked in ``async_to_sync``: Django's test client, a
  management command; a test's own loop): ``sync_to_async`` as Django documents it,
  thread-sensitive, so the call runs on that caller's thread and sees its transaction.

Either way the thread's connections are closed when the call returns (a pooled PostgreSQL
connection goes back to the pool), except one under an open atomic block: the async side
holds at most 12 connections, whatever the number of waiters.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

from asgiref.sync import sync_to_async
from django.db import connections

P = ParamSpec("P")
T = TypeVar("T")

# Threads per lane for database work on the serving loop (each holds a connection).
LANES = {"work": 8, "wake": 4}

_serving_loop: asyncio.AbstractEventLoop | None = None
_executors: dict[str, ThreadPoolExecutor] = {}
_lock = threading.Lock()


def serving_on(loop: asyncio.AbstractEventLoop) -> None:
    """Mark ``loop`` as the server's: database calls awaited there use the bounded lanes."""
    global _serving_loop
    _serving_loop = loop


def _executor(lane: str) -> ThreadPoolExecutor:
    with _lock:
        found = _executors.get(lane)
        if found is None:
            found = _executors[lane] = ThreadPoolExecutor(
                max_workers=LANES[lane], thread_name_prefix=f"impri-db-{lane}"
            )
        return found


def close_connections() -> None:
    """Close this thread's connections, leaving alone one inside an atomic block."""
    for conn in connections.all(initialized_only=True):
        if not conn.in_atomic_block:
            conn.close()


def database_sync_to_async(fn: Callable[P, T], lane: str = "work") -> Callable[P, Awaitable[T]]:
    """``fn`` as a coroutine function run by ``sync_to_async`` (see the module's docstring)."""
    assert lane in LANES, lane

    @functools.wraps(fn)
    def call(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return fn(*args, **kwargs)
        finally:
            close_connections()

    thread_sensitive = sync_to_async(call)
    bounded: list[Callable[..., Awaitable[T]]] = []

    @functools.wraps(fn)
    async def run(*args: P.args, **kwargs: P.kwargs) -> T:
        if _serving_loop is None or asyncio.get_running_loop() is not _serving_loop:
            return await thread_sensitive(*args, **kwargs)
        if not bounded:
            bounded.append(sync_to_async(call, thread_sensitive=False, executor=_executor(lane)))
        return await bounded[0](*args, **kwargs)

    return run
