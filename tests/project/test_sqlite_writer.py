"""Impri's SQLite backend queues the process's writers on a lock of its own (impri/sqlite3).

Each test opens its own connections to a real SQLite file in a temporary directory, through
a Django connection handler of its own, and runs Django's real ``transaction.atomic`` on
them (``using=ALIAS``), so it runs the same whichever database the suite is on.
"""

from __future__ import annotations

import gc
import os
import sqlite3
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
from django.db import transaction
from django.db.utils import ConnectionHandler, IntegrityError, OperationalError

from compat import django as queued_sqlite
from tests.threads import in_sqlite_busy_wait, on_sqlite_writer_queue

ALIAS = "writer-test"


def settings_for(path, timeout=20, mode="IMMEDIATE") -> dict:
    return {
        "default": {
            "ENGINE": "impri.sqlite3",
            "NAME": str(path),
            "OPTIONS": {
                "transaction_mode": mode,
                "timeout": timeout,
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA foreign_keys=ON;",
            },
        }
    }


class Database:
    """A SQLite file, with one Django connection per thread (as Django's own handler gives)."""

    def __init__(self, path, **options):
        self.path = Path(path)
        self.connections = ConnectionHandler(settings_for(path, **options))

    @property
    def conn(self):
        return self.connections["default"]

    def lock(self) -> threading.Lock:
        return queued_sqlite.writer_lock(os.path.realpath(self.path))

    def rows(self) -> list:
        with sqlite3.connect(self.path) as raw:
            return raw.execute("SELECT who FROM t ORDER BY id").fetchall()


@pytest.fixture(autouse=True)
def own_connections(django_db_blocker):
    """These tests open their own files, not the test database: let them connect."""
    with django_db_blocker.unblock():
        yield


@pytest.fixture
def databases(tmp_path, monkeypatch):
    """make(**options) -> Database; transaction.atomic(using=ALIAS) uses the latest one."""
    made: list[Database] = []
    original = transaction.get_connection

    def get_connection(using=None):
        return made[-1].conn if using == ALIAS else original(using)

    monkeypatch.setattr(transaction, "get_connection", get_connection)

    def make(name="writer.sqlite3", **options) -> Database:
        db = Database(tmp_path / name, **options)
        with db.conn.cursor() as cursor:
            cursor.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, who TEXT)")
            cursor.execute(
                "CREATE TABLE child (id INTEGER PRIMARY KEY,"
                " t_id INTEGER REFERENCES t (id) DEFERRABLE INITIALLY DEFERRED)"
            )
        db.conn.close()
        made.append(db)
        return db

    yield make
    for db in made:
        db.connections.close_all()


def insert(db, who):
    with db.conn.cursor() as cursor:
        cursor.execute("INSERT INTO t (who) VALUES (%s)", [who])


@contextmanager
def another_writer_holds(db):
    """Another writer of this process holds the file's queue for the block."""
    lock = db.lock()
    assert lock.acquire(timeout=1)
    try:
        yield
    finally:
        lock.release()


def in_thread(fn):
    """Run fn() on a fresh thread (which gets its own connection); return (thread, results)."""
    results: list = []

    def body():
        try:
            results.append(fn())
        except Exception as exc:  # handed to the test, which asserts on it
            results.append(exc)

    thread = threading.Thread(target=body)
    thread.start()
    return thread, results


def test_an_atomic_block_holds_the_file_s_lock_and_commit_gives_it_back(databases):
    db = databases()
    lock, seen = db.lock(), {}
    with transaction.atomic(using=ALIAS):
        seen["inside"] = lock.locked()
        insert(db, "a")
        transaction.on_commit(lambda: seen.setdefault("on_commit", lock.locked()), using=ALIAS)
    assert seen == {"inside": True, "on_commit": False}, "on_commit hooks ran under the lock"
    assert not lock.locked()
    assert db.rows() == [("a",)]


def test_an_exception_rolls_back_and_gives_the_lock_back(databases):
    db = databases()
    with pytest.raises(ZeroDivisionError), transaction.atomic(using=ALIAS):
        insert(db, "lost")
        raise ZeroDivisionError
    assert not db.lock().locked()
    assert db.rows() == []


def test_a_failed_commit_then_the_rollback_give_the_lock_back(databases):
    db = databases()
    # A deferred foreign key: the insert passes, the COMMIT fails.
    with pytest.raises(IntegrityError), transaction.atomic(using=ALIAS), db.conn.cursor() as c:
        c.execute("INSERT INTO child (t_id) VALUES (999)")
    assert not db.lock().locked(), "a failed COMMIT kept the writer lock"
    with transaction.atomic(using=ALIAS):  # and the next transaction begins at once
        insert(db, "next")
    assert db.rows() == [("next",)]


def test_closing_the_connection_inside_a_transaction_gives_the_lock_back(databases):
    db = databases()
    with transaction.atomic(using=ALIAS):
        insert(db, "dropped")
        db.conn.close()
        assert not db.lock().locked()
    assert db.rows() == []


def test_autocommit_turned_back_on_mid_transaction_gives_the_lock_back(databases):
    db = databases(timeout=1)
    db.conn.set_autocommit(False, force_begin_transaction_with_broken_autocommit=True)
    insert(db, "committed by sqlite3")
    db.conn.set_autocommit(True)  # Python's sqlite3 commits the open transaction
    assert not db.lock().locked()
    with transaction.atomic(using=ALIAS):  # would wait for its own lock otherwise
        insert(db, "next")
    assert db.rows() == [("committed by sqlite3",), ("next",)]


def test_a_connection_dropped_mid_transaction_does_not_keep_the_lock(databases):
    db = databases(timeout=1)

    def abandon():  # a thread that dies in a transaction: its connection is never closed
        conn = db.conn
        conn.set_autocommit(False, force_begin_transaction_with_broken_autocommit=True)
        insert(db, "abandoned")

    thread, results = in_thread(abandon)
    thread.join(10)
    assert results == [None], results
    gc.collect()  # the thread's connection, unreachable now, is collected
    assert not db.lock().locked(), "the lock outlived the connection that held it"
    with transaction.atomic(using=ALIAS):
        insert(db, "after")
    assert db.rows() == [("after",)]


def test_a_second_writer_waits_on_the_queue_not_in_sqlite_s_busy_handler(databases):
    db = databases()
    first_began, release_first, waiting = threading.Event(), threading.Event(), {}

    def first():
        with transaction.atomic(using=ALIAS):
            insert(db, "first")
            first_began.set()
            release_first.wait(10)

    def second():
        waiting["ident"] = threading.get_ident()
        first_began.wait(10)
        with transaction.atomic(using=ALIAS):
            insert(db, "second")

    t1, r1 = in_thread(first)
    assert first_began.wait(10)
    t2, r2 = in_thread(second)
    # Watch the second writer for half a second while the first holds the file.
    queued = slept = 0
    deadline = time.monotonic() + 0.5
    while time.monotonic() < deadline:
        if "ident" in waiting:
            queued += on_sqlite_writer_queue(waiting["ident"])
            slept += in_sqlite_busy_wait(waiting["ident"])
        time.sleep(0.002)
    assert t2.is_alive(), "the second writer did not wait for the first"
    release_first.set()
    t1.join(10)
    t2.join(10)
    assert r1 == [None] and r2 == [None], (r1, r2)
    assert queued and not slept, (
        f"the second writer was seen on the queue {queued} times and asleep in SQLite's busy "
        f"handler {slept} times"
    )
    assert db.rows() == [("first",), ("second",)]
    assert not db.lock().locked()


def test_the_wait_on_the_queue_is_bounded_by_the_timeout_option(databases):
    db = databases(timeout=0.3)

    def writer():
        started = time.monotonic()
        try:
            with transaction.atomic(using=ALIAS):
                insert(db, "late")
        except OperationalError as exc:
            return exc, time.monotonic() - started
        return None, time.monotonic() - started

    with another_writer_holds(db):
        thread, results = in_thread(writer)
        thread.join(10)
    error, waited = results[0]
    assert isinstance(error, OperationalError) and "database is locked" in str(error), results
    assert 0.25 <= waited < 5, waited
    assert db.rows() == []


def test_a_failed_begin_gives_the_lock_back(databases):
    db = databases(timeout=0.2)
    # Another process holds SQLite's own write lock: BEGIN IMMEDIATE fails after the timeout.
    other = sqlite3.connect(db.path, isolation_level=None, timeout=0)
    other.execute("BEGIN IMMEDIATE")
    try:

        def writer():
            try:
                with transaction.atomic(using=ALIAS):
                    pass
            except OperationalError as exc:
                return exc, db.lock().locked()  # before this thread's connection closes
            return None, None

        thread, results = in_thread(writer)
        thread.join(10)
    finally:
        other.execute("ROLLBACK")
        other.close()
    error, still_locked = results[0]
    assert isinstance(error, OperationalError), results
    assert still_locked is False, "a failed BEGIN kept the writer lock"


def finished_while_the_queue_is_held(db, fn, what) -> list:
    with another_writer_holds(db):
        thread, results = in_thread(fn)
        thread.join(5)
        assert not thread.is_alive(), f"{what} waited on the writer queue"
    return results


def test_reads_outside_a_transaction_do_not_wait(databases):
    db = databases()

    def read():
        return db.conn.cursor().execute("SELECT count(*) FROM t").fetchone()

    assert finished_while_the_queue_is_held(db, read, "a plain read") == [(0,)]


def test_deferred_transactions_are_not_queued(databases):
    db = databases(mode="DEFERRED")  # read-only transactions never took the write lock there

    def read():
        with transaction.atomic(using=ALIAS), db.conn.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM t")
            return cursor.fetchone()

    assert finished_while_the_queue_is_held(db, read, "a DEFERRED transaction") == [(0,)]


def test_two_files_have_two_locks(tmp_path):
    assert queued_sqlite.writer_lock(str(tmp_path / "a")) is not queued_sqlite.writer_lock(
        str(tmp_path / "b")
    )


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork() is POSIX only")
def test_a_forked_child_does_not_inherit_a_held_lock(databases):
    db = databases()
    with another_writer_holds(db):
        pid = os.fork()
        if pid == 0:  # the child: the parent's holder thread does not exist here
            os._exit(0 if db.lock().acquire(timeout=2) else 1)
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the child found the parent's held lock"
