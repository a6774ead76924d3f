"""Impri's SQLite backend queues the process's writers on a lock of its own (impri/sqlite3).

Each test opens its own connections (Django's connection handler, real SQLite files in a
temporary directory), so it runs the same whichever database the suite is on.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time

import pytest
from django.db.utils import ConnectionHandler, OperationalError

from impri.sqlite3 import base as impri_sqlite


def handler(path, timeout=20) -> ConnectionHandler:
    return ConnectionHandler(
        {
            "default": {
                "ENGINE": "impri.sqlite3",
                "NAME": str(path),
                "OPTIONS": {
                    "transaction_mode": "IMMEDIATE",
                    "timeout": timeout,
                    "init_command": "PRAGMA journal_mode=WAL;",
                },
            }
        }
    )


def lock_of(path) -> threading.Lock:
    return impri_sqlite._writer_lock(os.path.realpath(path))


def in_thread(fn, path, timeout=20):
    """Run fn(connection) on a fresh thread with its own connection; return (thread, results)."""
    results: list = []

    def body():
        conn = handler(path, timeout)["default"]
        try:
            results.append(fn(conn))
        except Exception as exc:  # handed to the test, which asserts on it
            results.append(exc)
        finally:
            conn.close()

    thread = threading.Thread(target=body)
    thread.start()
    return thread, results


@pytest.fixture(autouse=True)
def own_connections(django_db_blocker):
    """These tests open their own files, not the test database: let them connect."""
    with django_db_blocker.unblock():
        yield


@pytest.fixture
def db_file(tmp_path):
    path = tmp_path / "writer.sqlite3"
    conn = handler(path)["default"]
    with conn.cursor() as cursor:
        cursor.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, who TEXT)")
    conn.close()
    return path


def test_a_transaction_holds_the_file_s_lock_until_commit_or_rollback(db_file):
    conn = handler(db_file)["default"]
    lock = lock_of(db_file)
    assert not lock.locked()
    conn.set_autocommit(False, force_begin_transaction_with_broken_autocommit=True)
    assert lock.locked(), "BEGIN did not take the writer lock"
    with conn.cursor() as cursor:
        cursor.execute("INSERT INTO t (who) VALUES ('a')")
    conn.commit()
    conn.set_autocommit(True)
    assert not lock.locked(), "COMMIT did not give the writer lock back"

    conn.set_autocommit(False, force_begin_transaction_with_broken_autocommit=True)
    assert lock.locked()
    conn.rollback()
    conn.set_autocommit(True)
    assert not lock.locked(), "ROLLBACK did not give the writer lock back"

    conn.set_autocommit(False, force_begin_transaction_with_broken_autocommit=True)
    assert lock.locked()
    conn.close()
    assert not lock.locked(), "closing the connection did not give the writer lock back"


def test_a_second_writer_waits_for_the_first_and_then_writes(db_file):
    first_began, release_first = threading.Event(), threading.Event()

    def first(conn):
        with _atomic(conn):
            with conn.cursor() as cursor:
                cursor.execute("INSERT INTO t (who) VALUES ('first')")
            first_began.set()
            release_first.wait(10)
        return time.monotonic()

    def second(conn):
        first_began.wait(10)
        with _atomic(conn), conn.cursor() as cursor:
            cursor.execute("INSERT INTO t (who) VALUES ('second')")
        return time.monotonic()

    t1, r1 = in_thread(first, db_file)
    t2, r2 = in_thread(second, db_file)
    assert first_began.wait(10)
    time.sleep(0.3)
    assert t2.is_alive(), "the second writer did not wait for the first"
    release_first.set()
    t1.join(10)
    t2.join(10)
    assert not isinstance(r1[0], Exception) and not isinstance(r2[0], Exception), (r1, r2)
    assert r1[0] <= r2[0]
    rows = sqlite3.connect(db_file).execute("SELECT who FROM t ORDER BY id").fetchall()
    assert rows == [("first",), ("second",)]
    assert not lock_of(db_file).locked()


def test_the_wait_is_bounded_by_the_timeout_option(db_file):
    lock = lock_of(db_file)
    assert lock.acquire(timeout=1)  # another writer of this process, holding on
    try:

        def writer(conn):
            started = time.monotonic()
            try:
                with _atomic(conn), conn.cursor() as cursor:
                    cursor.execute("INSERT INTO t (who) VALUES ('late')")
            except OperationalError as exc:
                return exc, time.monotonic() - started
            return None, time.monotonic() - started

        thread, results = in_thread(writer, db_file, timeout=0.3)
        thread.join(10)
    finally:
        lock.release()
    error, waited = results[0]
    assert isinstance(error, OperationalError) and "database is locked" in str(error), results
    assert 0.25 <= waited < 5, waited
    assert sqlite3.connect(db_file).execute("SELECT count(*) FROM t").fetchone() == (0,)


def test_a_failed_begin_gives_the_lock_back(db_file):
    # Another process holds SQLite's own write lock: BEGIN IMMEDIATE fails after the timeout.
    other = sqlite3.connect(db_file, isolation_level=None, timeout=0)
    other.execute("BEGIN IMMEDIATE")
    try:

        def writer(conn):
            try:
                with _atomic(conn):
                    pass
            except OperationalError as exc:
                return exc
            return None

        thread, results = in_thread(writer, db_file, timeout=0.2)
        thread.join(10)
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert isinstance(results[0], OperationalError), results
    assert not lock_of(db_file).locked(), "a failed BEGIN kept the writer lock"


def test_reads_outside_a_transaction_do_not_wait(db_file):
    lock = lock_of(db_file)
    assert lock.acquire(timeout=1)
    try:
        thread, results = in_thread(
            lambda conn: conn.cursor().execute("SELECT count(*) FROM t").fetchone(), db_file
        )
        thread.join(5)
        assert not thread.is_alive(), "a plain read waited on the writer lock"
    finally:
        lock.release()
    assert results == [(0,)]


def test_two_files_have_two_locks(tmp_path):
    assert lock_of(tmp_path / "a.sqlite3") is not lock_of(tmp_path / "b.sqlite3")
    assert lock_of(tmp_path / "a.sqlite3") is lock_of(tmp_path / "." / "a.sqlite3")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork() is POSIX only")
def test_a_forked_child_does_not_inherit_a_held_lock(db_file):
    lock = lock_of(db_file)
    assert lock.acquire(timeout=1)
    try:
        pid = os.fork()
        if pid == 0:  # the child: the parent's holder thread does not exist here
            ok = impri_sqlite._writer_lock(os.path.realpath(db_file)).acquire(timeout=2)
            os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
    finally:
        lock.release()
    assert os.waitstatus_to_exitcode(status) == 0, "the child found the parent's held lock"


def _atomic(conn):
    """transaction.atomic() on this wrapper (not on Django's `connections`)."""
    return _WrapperAtomic(conn)


class _WrapperAtomic:
    def __init__(self, conn):
        self.conn = conn

    def __enter__(self):
        self.conn.set_autocommit(False, force_begin_transaction_with_broken_autocommit=True)

    def __exit__(self, exc_type, exc, tb):
        try:
            if exc_type is None:
                self.conn.commit()
            else:
                self.conn.rollback()
        finally:
            self.conn.set_autocommit(True)
