"""SQLite with an in-process writer queue: Django's backend, plus a lock per file.

On SQLite a transaction starts with ``BEGIN IMMEDIATE`` and holds the file's
one write lock until it ends. A second writer in the same process used to wait
in SQLite's busy handler, which *sleeps* (1, 2, 5 … up to 100 ms a try) instead
of waking when the lock frees: under sixteen concurrent pushes the lock sat
idle between transactions and a push's p99 reached half a second.

Here every connection of the process to the same file first takes a Python lock
for that file, then begins; commit, rollback or close give it back. A writer
waiting in this process wakes the moment the lock frees (a futex, not a sleep;
not strictly first come, first served), and SQLite's own lock still orders this
process against others (an ``impri mcp`` over stdio, a management command).

What is queued: the transactions Django begins (``transaction.atomic``), and only
with ``transaction_mode`` IMMEDIATE or EXCLUSIVE, where every transaction, read-only
or not, already held the file's write lock from its start to its end. Statements
outside a transaction (a lone ``save()`` or ``update()``) still wait in SQLite's
busy handler. A writer waits up to the ``timeout`` option for this process's queue,
then, if another process holds the file, up to ``timeout`` again in SQLite's; both
end in the same ``database is locked`` error.
"""

from __future__ import annotations

import os
import threading
import weakref

from django.db.backends.sqlite3 import base
from django.db.utils import OperationalError

_guard = threading.Lock()
_writers: dict[str, threading.Lock] = {}


def _writer_lock(name: str) -> threading.Lock:
    with _guard:
        lock = _writers.get(name)
        if lock is None:
            lock = _writers[name] = threading.Lock()
        return lock


def _forget_locks() -> None:
    # A child of fork() has only the forking thread: a lock another thread
    # held at the fork would never be released there.
    global _guard
    _guard = threading.Lock()
    _writers.clear()


os.register_at_fork(after_in_child=_forget_locks)


def _release(held: list) -> None:
    lock, held[0] = held[0], None
    if lock is not None:
        lock.release()


class DatabaseWrapper(base.DatabaseWrapper):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # The lock this connection holds, if any. A wrapper dropped mid-transaction
        # (its thread died, say) gives it back when collected: SQLite's lock goes
        # with the connection, and ours must not outlive it.
        self._held: list = [None]
        weakref.finalize(self, _release, self._held)
        # (the NAME it was worked out for, the file key of its queue or None)
        self._queue: tuple[object, str | None] = (None, None)

    def _queued(self) -> str | None:
        """The file whose writer queue this connection's transactions join, if any."""
        name = self.settings_dict["NAME"]
        if self._queue[0] != name:  # Django's test runner renames the database after start-up
            mode = self.settings_dict["OPTIONS"].get("transaction_mode")
            queued = (mode or "").upper() in {"IMMEDIATE", "EXCLUSIVE"}
            # An in-memory database is private to its connection (or, shared, never a
            # file another process writes): nothing to queue for.
            key = os.path.realpath(name) if queued and not self.is_in_memory_db() else None
            self._queue = (name, key)
        return self._queue[1]

    def _start_transaction_under_autocommit(self):
        name = self._queued()
        if name is None:
            return super()._start_transaction_under_autocommit()
        lock = _writer_lock(name)
        timeout = float(self.settings_dict["OPTIONS"].get("timeout", 5))
        if not lock.acquire(timeout=timeout):
            raise OperationalError("database is locked")
        self._held[0] = lock
        try:
            super()._start_transaction_under_autocommit()
        except BaseException:
            _release(self._held)
            raise

    def _commit(self):
        result = super()._commit()
        _release(self._held)  # a failed COMMIT leaves the transaction open: rollback releases
        return result

    def _rollback(self):
        try:
            return super()._rollback()
        finally:
            _release(self._held)

    def _close(self):
        try:
            return super()._close()
        finally:
            _release(self._held)

    def _set_autocommit(self, autocommit):
        super()._set_autocommit(autocommit)
        if autocommit:  # sqlite3 commits an open transaction when autocommit comes back
            _release(self._held)
