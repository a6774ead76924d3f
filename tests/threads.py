"""Racing real threads against a real database."""

from __future__ import annotations

import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from django.db import connection


def run_together(calls: list) -> list:
    """Start every call at the same instant, each on its own thread and DB connection."""
    barrier = threading.Barrier(len(calls))

    def run(call):
        try:
            barrier.wait()
            return call()
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=len(calls)) as pool:
        return list(pool.map(run, calls))


# nanosleep, clock_nanosleep (x86_64): sqlite3_sleep(), where SQLite's busy handler waits.
SLEEP_SYSCALLS = {"35", "230"}


def in_sleep_syscall(task: Path) -> bool:
    """Whether the thread ``task`` (``/proc/<pid>/task/<tid>``) is inside a sleep syscall now."""
    try:
        return task.joinpath("syscall").read_text().split(" ", 1)[0] in SLEEP_SYSCALLS
    except OSError:  # the thread has ended
        return False


def in_sqlite_busy_wait(ident: int) -> bool:
    """Whether thread ``ident`` of this process is in a ``BEGIN`` that waits for SQLite's lock.

    Its innermost Python frame is then Django's SQLite backend running the ``BEGIN``
    (``BEGIN IMMEDIATE`` from ``_start_transaction_under_autocommit``, or a cursor's):
    that statement's C call is where SQLite's busy handler sleeps until the file's
    lock frees. Read from the thread's frames, so it holds on every platform (the
    syscall numbers of ``in_sleep_syscall`` are x86_64's).
    """
    frame = sys._current_frames().get(ident)
    if frame is None or not frame.f_code.co_filename.endswith(
        str(Path("backends", "sqlite3", "base.py"))
    ):
        return False
    if frame.f_code.co_name == "_start_transaction_under_autocommit":  # BEGIN IMMEDIATE
        return True
    return frame.f_code.co_name == "execute" and str(
        frame.f_locals.get("query", "")
    ).lstrip().upper().startswith("BEGIN")
