"""asgiref's private state Impri reads: whether a sync caller is blocked on this coroutine.

``AsyncToSync.executors`` is a ``Local`` whose ``current`` is set while a sync thread
waits in ``async_to_sync`` for a coroutine (Django's test client, a management
command). Django's own ``sync_to_async`` (``thread_sensitive=True``) uses the same
state to run the call on that very thread. Impri's database pool
(``plumbing.db_threads.run``) asks it so that such a caller's database work runs on
its own thread and sees its open transaction, instead of on the pool, where it would
not. Needed for correctness (a test's or a command's transaction), not speed.

Re-read ``asgiref/sync.py`` (``AsyncToSync.__call__`` and
``SyncToAsync.__call__``) before moving ``WRITTEN_FOR`` (``tests/project/test_compat.py``).
"""

from __future__ import annotations

from asgiref.sync import AsyncToSync

WRITTEN_FOR = {"asgiref": "3.13"}
UPSTREAM = {"asgiref.sync:AsyncToSync.__call__": "811b9e33968648b2"}


def sync_caller_waiting() -> bool:
    """Whether a sync thread is blocked in ``async_to_sync`` waiting for the running coroutine."""
    return getattr(AsyncToSync.executors, "current", None) is not None
