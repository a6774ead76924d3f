"""How async code (REST long-polls, MCP tools, the waiter hub, probes) runs database work.

One policy for every async caller: the call runs on a small bounded thread
pool (``IMPRI_DB_THREADS`` workers), and when it finishes the thread gives its
database connection back (to the psycopg pool on PostgreSQL). So:

- a slow write stalls only its caller, never the process's one shared sync
  thread (asgiref's ``thread_sensitive`` default, where every MCP call of every
  session used to queue behind each other);
- nothing that waits holds a connection: a waiter holds a future, and borrows
  a thread and a connection only for the instant of a read;
- the number of connections the async side can hold is bounded by the pool
  size, whatever the number of waiters.

SQLite connections are cheap and local, so a worker thread keeps its own open
between calls (WAL lets readers run beside the writer).
"""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import close_old_connections, connections

from compat.asgiref import sync_caller_waiting

T = TypeVar("T")

_lock = threading.Lock()
_executors: dict[str, ThreadPoolExecutor] = {}
_callers: dict[str, Callable[..., Any]] = {}

# Lanes: "work" runs requests' bodies; "wake" runs the short reads of woken
# waiters and the hub's batched re-read, so that a burst of slow writes never
# delays telling an agent its decision.
LANES = {"work": 1.0, "wake": 0.5}


def executor(lane: str = "work") -> ThreadPoolExecutor:
    with _lock:
        found = _executors.get(lane)
        if found is None:
            threads = max(2, round(settings.IMPRI_DB_THREADS * LANES[lane]))
            found = _executors[lane] = ThreadPoolExecutor(
                max_workers=threads, thread_name_prefix=f"impri-db-{lane}"
            )
            # asgiref's wrapper, made once per lane (not per call): it carries context
            # variables and lets code in the thread reach back into this loop
            # (async_to_sync, used by the after-commit publish) exactly as Django's own
            # sync_to_async does.
            _callers[lane] = sync_to_async(_call, thread_sensitive=False, executor=found)
        return found


async def run(fn: Callable[..., T], /, *args: Any, lane: str = "work", **kwargs: Any) -> T:
    """Run ``fn(*args, **kwargs)`` on the database pool and return its result.

    Context variables are carried over (like ``sync_to_async``), and the
    connection is released when ``fn`` returns or raises. A caller that is
    cancelled stops waiting, but the call itself runs to its end (a thread
    can't be interrupted), then releases its connection like any other.
    """
    if sync_caller_waiting():
        # A sync thread is blocked waiting for this coroutine (a sync caller
        # went through async_to_sync: Django's test client, a management
        # command). Run there, as Django's thread-sensitive default does: it
        # costs no extra thread and sees that caller's transaction.
        return await sync_to_async(fn)(*args, **kwargs)
    call = _callers.get(lane)
    if call is None:
        executor(lane)
        call = _callers[lane]
    return await call(fn, args, kwargs)


def view(fn: Callable[..., T]) -> Callable[..., Any]:
    """A sync ninja view as an async one whose whole body is one call on the pool.

    The request then needs no thread of its own (see ``impri.asgi``): one hop
    to a pooled thread and back, whatever the view does inside. The signature
    (with its annotations resolved in ``fn``'s module) is kept for ninja.
    """

    @functools.wraps(fn)
    async def wrapper(*args: Any, **kwargs: Any) -> T:
        return await run(fn, *args, **kwargs)

    wrapper.__signature__ = inspect.signature(fn, eval_str=True)
    return wrapper


def wrap(fn: Callable[..., T], lane: str = "work") -> Callable[..., Any]:
    """``fn`` as a coroutine function that runs on the database pool."""

    @functools.wraps(fn)
    async def wrapper(*args: Any, **kwargs: Any) -> T:
        return await run(fn, *args, lane=lane, **kwargs)

    return wrapper


def _call(fn: Callable[..., T], args: tuple, kwargs: dict) -> T:
    close_old_connections()
    try:
        return fn(*args, **kwargs)
    finally:
        release_connections()


def release_connections() -> None:
    """Give this thread's connections back; keep a healthy SQLite one for the next call."""
    for conn in connections.all(initialized_only=True):
        if conn.in_atomic_block:  # never close under an open transaction (a test's, say)
            continue
        if conn.vendor == "sqlite":
            conn.close_if_unusable_or_obsolete()
        else:
            conn.close()
