"""SQLite with an in-process writer queue: Django's backend, plus a lock per file.

On SQLite a transaction starts with ``BEGIN IMMEDIATE`` and holds the file's
one write lock until it ends. A second writer in the same process used to wait
in SQLite's busy handler, which *sleeps* (1, 2, 5 … up to 100 ms a try) instead
of waking when the lock frees: under sixteen concurrent pushes the lock sat
idle between transactions and a push's p99 reached half a second.

Here every connection of the process to the same file first takes a Python lock
for that file, then begins; commit, rollback or close give it back. A writer
waiting in this process wakes the moment the lock frees (a futex, not a sleep),
and SQLite's own lock (with its ``timeout``) still orders this process against
others (a ``impri mcp`` over stdio, a management command).

The semantics are the ones ``BEGIN IMMEDIATE`` already had: a transaction,
read-only or not, holds the file's write lock from its start to its end. The
wait is bounded by the same ``timeout`` option, and ends in the same
``database is locked`` error.
"""

from __future__ import annotations

import os
import threading

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


class DatabaseWrapper(base.DatabaseWrapper):
    _writer: threading.Lock | None = None

    def _start_transaction_under_autocommit(self):
        if self.is_in_memory_db():  # one connection per database: nothing to queue
            return super()._start_transaction_under_autocommit()
        lock = _writer_lock(os.path.realpath(self.settings_dict["NAME"]))
        timeout = float(self.settings_dict["OPTIONS"].get("timeout", 5))
        if not lock.acquire(timeout=timeout):
            raise OperationalError("database is locked")
        self._writer = lock
        try:
            super()._start_transaction_under_autocommit()
        except BaseException:
            self._release_writer()
            raise

    def _commit(self):
        result = super()._commit()
        self._release_writer()  # a failed COMMIT leaves the transaction open: rollback releases
        return result

    def _rollback(self):
        try:
            return super()._rollback()
        finally:
            self._release_writer()

    def _close(self):
        try:
            return super()._close()
        finally:
            self._release_writer()

    def _release_writer(self) -> None:
        lock, self._writer = self._writer, None
        if lock is not None:
            lock.release()
