"""Django internals Impri overrides: the ASGI handler's ``handle`` and the SQLite backend.

1. ``LoopSignalsASGIHandler.handle`` is a copy of ``ASGIHandler.handle`` (Django 5.2)
   that sends ``request_started`` and ``request_finished`` on the event loop instead of
   through ``sync_to_async``. Django's two hops a request go to the process's one shared
   sync thread, where every request's hops queue behind every other's and behind whatever
   else runs there; the receivers (``close_old_connections``, ``reset_queries``,
   ``close_caches``, ``reset_urlconf``) act on the calling thread's connections and
   caches, and a request whose database work runs on other threads opens none on the
   loop's. Kept for that isolation: with Django's ``handle`` an API request waits for
   a busy shared thread (``tests/core/test_waiting_hub.py``,
   ``test_an_api_call_needs_nothing_from_the_shared_sync_thread``, fails). The CPU it
   saves is under 5 % of a push: 0.16 ms of ~4.9 (docs/benchmarks.md, "Framework
   overrides"). Only sync receivers may be connected to those signals (a coroutine
   receiver would be run through ``async_to_sync`` on the loop, which refuses).
2. ``LoopSignalsASGIHandler.load_middleware`` builds the handler's chain from another
   setting than ``MIDDLEWARE``: ``BaseHandler.load_middleware`` reads only
   ``settings.MIDDLEWARE``, so it is swapped for the duration of the call (once, at
   start-up, before any request). Needed for behaviour, not speed: the API's stack is
   not the browsers' (no sessions, CSRF or messages; JSON errors).
3. ``in_code_atomic_block`` reads ``Atomic._from_testcase``, Django's mark on the blocks
   ``TestCase`` opens around each test, so that a service that forgot its own transaction
   fails under test as in production (``audit.log.record``). Needed for the tests to be
   able to fail, not speed.
4. ``CompiledQuery`` keeps a queryset's SQL as Django's compiler wrote it (``as_sql``)
   with its value converters (``get_converters``, ``apply_converters``), and runs it
   again with one parameter bound. Building and compiling the ORM's statement for a
   group's notification channels cost ~30 times running it on every push that reaches a
   queue (``approvals.outbox``; docs/benchmarks.md, "Hand-written SQL and the ORM");
   compiled once, it is the ORM's SQL with no SQL written by hand.
5. ``Columns`` turns the row of a hand-written SELECT back into a model instance as the ORM
   would: the SELECT list of a model's concrete columns, each value through the backend's
   and the field's converters (``DatabaseOperations.get_db_converters``,
   ``Field.get_db_converters``, ``Field.get_col``), then ``Model.from_db``. The key check
   that every API call makes reads its row so (``identity.keys``; its ORM twin cost
   14–19 % of a push: docs/benchmarks.md, "Hand-written SQL and the ORM").
6. ``prepared_cursor`` gives a Django cursor (the debug wrapper, the error wrapping, the
   timezone of ``create_cursor``) over a psycopg cursor that binds on the server and
   prepares each statement on its connection the first time it runs there. Django's
   PostgreSQL cursors bind on the client, so the server parses and plans every statement
   every time; for the few statements each push runs by hand, planning measured as
   much as running them (0.1-0.6 ms each on the benchmark VM: docs/benchmarks.md, "A
   push near the floor"). A prepared statement is planned a few times, then PostgreSQL
   keeps its generic plan. It builds what ``BaseDatabaseWrapper._cursor`` builds, from
   ``create_cursor``'s timezone check and ``_prepare_cursor``; SQLite gets its own cursor.
   ``preparing`` does the same for the statements the ORM writes in a block (the push's
   ``INSERT``, an approve's statements), by giving the connection that ``create_cursor``
   for the block's duration. ``IMPRI_DB_PREPARE=off`` turns both into Django's own cursors
   (a transaction-pooling PgBouncer without ``max_prepared_statements``).
7. ``QueuedWritersSQLiteWrapper`` overrides five private methods of the SQLite backend's
   ``DatabaseWrapper`` (``_start_transaction_under_autocommit``, ``_commit``,
   ``_rollback``, ``_close``, ``_set_autocommit``) to queue a process's transactions on
   a Python lock per file (below). It buys latency, not CPU: at 16 clients a push's p99
   is shorter (docs/benchmarks.md, "Framework overrides"), its CPU the same.

Re-read each against Django's source before moving ``WRITTEN_FOR``
(``tests/project/test_compat.py``): ``django/core/handlers/asgi.py`` (``handle``),
``django/core/handlers/base.py`` (``load_middleware``) and
``django/db/backends/sqlite3/base.py`` with ``django/db/backends/base/base.py``, and
``django/db/transaction.py`` (``Atomic``) with ``django/test/testcases.py`` (``_enter_atomics``),
and ``django/db/models/sql/compiler.py`` (``SQLCompiler``), and
``django/db/backends/postgresql/base.py`` (``create_cursor``, ``ServerBindingCursor``) with
``BaseDatabaseWrapper._cursor`` and ``_prepare_cursor``, and psycopg's ``_cursor_base.py``
(``_send_query_prepared``, ``_execute_send``: ``_query``, which Django's debug cursor reads).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import weakref
from functools import cache

from django.conf import settings
from django.core import signals
from django.core.exceptions import RequestAborted
from django.core.handlers.asgi import ASGIHandler, get_script_prefix
from django.db import connections
from django.db.backends.sqlite3 import base as sqlite_base
from django.db.models import Model
from django.db.utils import OperationalError
from django.urls import set_script_prefix

WRITTEN_FOR = {"django": "5.2", "psycopg": "3.3"}

# The upstream code each override copies, calls into or replaces: module:qualname -> the
# digest of its source as read (compat.source_digest). A change, even in a patch
# release, fails tests/project/test_compat.py until the override is read against it again.
UPSTREAM = {
    "django.core.handlers.asgi:ASGIHandler.handle": "98faeb5bef800331",
    "django.core.handlers.base:BaseHandler.load_middleware": "a1fb7ee5f8586195",
    "django.db.backends.sqlite3.base:DatabaseWrapper._start_transaction_under_autocommit": (
        "7315cfc61c1dde12"
    ),
    "django.db.backends.base.base:BaseDatabaseWrapper._commit": "8ebc361e1e8fcb8d",
    "django.db.backends.base.base:BaseDatabaseWrapper._rollback": "d671ec3bb3c8ed44",
    "django.db.backends.base.base:BaseDatabaseWrapper._close": "d1a3f0e9a11cd084",
    "django.db.backends.sqlite3.base:DatabaseWrapper._set_autocommit": "951168e64a4baa0d",
    "django.db.transaction:Atomic.__enter__": "1cccb72ad29b1ace",
    "django.test.testcases:TestCase._enter_atomics": "4d46a3c8b64374e8",
    "django.db.models.sql.compiler:SQLCompiler.as_sql": "0f0b77905ec86137",
    "django.db.models.sql.compiler:SQLCompiler.get_converters": "c6c8c1b71882ee8b",
    "django.db.models.sql.compiler:SQLCompiler.apply_converters": "c034ce3e5090aa2e",
    "django.db.models.fields:Field.get_col": "c2b8e9059b77826e",
    "django.db.models.fields:Field.get_db_converters": "500e7255cd2940d1",
    "django.db.backends.postgresql.base:DatabaseWrapper.create_cursor": "5309d92ffca3e871",
    "django.db.backends.base.base:BaseDatabaseWrapper._cursor": "bb632516d005185c",
    "django.db.backends.base.base:BaseDatabaseWrapper._prepare_cursor": "92079d0eed95d59d",
    "django.db.backends.postgresql.base:ServerBindingCursor": "867ab9c95c4165ea",
    # The PostgreSQL driver's cursor, under prepared_cursor: where it keeps ``_query``.
    "psycopg._cursor_base:BaseCursor._send_query_prepared": "b93f0ec6a1ac9ed2",
    "psycopg._cursor_base:BaseCursor._execute_send": "2e4b180e6286fe07",
}


class LoopSignalsASGIHandler(ASGIHandler):
    """Django's ASGI handler with the request signals sent on the loop, and its own middleware.

    ``middleware_setting`` names the setting its middleware chain is built from.
    """

    middleware_setting = "MIDDLEWARE"

    async def handle(self, scope, receive, send):
        """``ASGIHandler.handle`` of Django 5.2, with the request signals sent on the loop."""
        try:
            body_file = await self.read_body(receive)
        except RequestAborted:
            return
        set_script_prefix(get_script_prefix(scope))
        signals.request_started.send(sender=self.__class__, scope=scope)
        request, error_response = self.create_request(scope, body_file)
        if request is None:
            body_file.close()
            await self.send_response(error_response, send)
            error_response.close()
            return

        async def process_request():
            response = await self.run_get_response(request)
            with contextlib.suppress(asyncio.CancelledError):  # the client went away meanwhile
                await self.send_response(response, send)
            return response

        tasks = [
            # First, as in Django: it raises nothing unexpected that would keep
            # process_request from being cancelled.
            asyncio.create_task(self.listen_for_disconnect(receive)),
            asyncio.create_task(process_request()),
        ]
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in tasks:
            if task.done():
                try:
                    task.result()
                except RequestAborted:
                    pass
                except AssertionError:
                    body_file.close()
                    raise
            else:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        try:
            response = tasks[1].result()
        except asyncio.CancelledError:
            signals.request_finished.send(sender=self.__class__)
        else:
            response.close()
        body_file.close()

    def load_middleware(self, is_async=False):
        # Django reads settings.MIDDLEWARE here, once, at start-up.
        standard = settings.MIDDLEWARE
        settings.MIDDLEWARE = getattr(settings, self.middleware_setting)
        try:
            super().load_middleware(is_async=is_async)
        finally:
            settings.MIDDLEWARE = standard


def in_code_atomic_block(connection) -> bool:
    """True inside an atomic block that code opened; a test case's own blocks do not count."""
    return any(not getattr(block, "_from_testcase", False) for block in connection.atomic_blocks)


# --- SQLite: the process's writers queue on a lock per file -------------------------------
#
# On SQLite a transaction starts with ``BEGIN IMMEDIATE`` and holds the file's one write
# lock until it ends. A second writer in the same process used to wait in SQLite's busy
# handler, which *sleeps* (1, 2, 5 ... up to 100 ms a try) instead of waking when the lock
# frees: under sixteen concurrent pushes the lock sat idle between transactions.
#
# Here every connection of the process to the same file first takes a Python lock for
# that file, then begins; commit, rollback or close give it back. A writer waiting in this
# process wakes the moment the lock frees (a futex, not a sleep; not strictly first come,
# first served), and SQLite's own lock still orders this process against others.
#
# What is queued: the transactions Django begins (``transaction.atomic``), and only with
# ``transaction_mode`` IMMEDIATE or EXCLUSIVE, where every transaction already held the
# file's write lock from its start to its end. Statements outside a transaction still wait
# in SQLite's busy handler. A writer waits up to the ``timeout`` option for this process's
# queue, then, if another process holds the file, up to ``timeout`` again in SQLite's; both
# end in the same ``database is locked`` error.

_guard = threading.Lock()
_writers: dict[str, threading.Lock] = {}


def writer_lock(name: str) -> threading.Lock:
    """The process's lock for the SQLite file ``name`` (a real path)."""
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


class QueuedWritersSQLiteWrapper(sqlite_base.DatabaseWrapper):
    """Django's SQLite ``DatabaseWrapper``; its transactions first queue on the file's lock."""

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
        lock = writer_lock(name)
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


class CompiledQuery:
    """A queryset's statement compiled once by Django's compiler, run again with one value bound.

    ``placeholder`` is a value that stands where each call's value goes (an integer no
    row has, say); every parameter equal to it, of its type, is replaced on each run. The
    row comes back through the ORM's own converters, as ``values_list`` would give it.
    """

    def __init__(self, queryset, placeholder):
        self.compiler = queryset.query.get_compiler(queryset.db)
        self.sql, params = self.compiler.as_sql()
        self.params = list(params)
        self.slots = [
            i
            for i, p in enumerate(self.params)
            if type(p) is type(placeholder) and p == placeholder
        ]
        if not self.slots:
            raise ValueError("the placeholder is not among the compiled statement's parameters")
        self.converters = self.compiler.get_converters([col for col, _, _ in self.compiler.select])

    def first(self, connection, value) -> tuple | None:
        params = list(self.params)
        for slot in self.slots:
            params[slot] = value
        with prepared_cursor(connection) as cursor:
            cursor.execute(self.sql, params)
            row = cursor.fetchone()
        if row is None or not self.converters:
            return row
        return tuple(next(iter(self.compiler.apply_converters([row], self.converters))))


class Columns:
    """One model's concrete columns, as a SELECT list under a table alias, and back to an instance."""

    def __init__(self, model: type[Model], alias: str, using: str):
        self.model = model
        self.using = using
        connection = connections[using]
        quote = connection.ops.quote_name
        fields = model._meta.concrete_fields
        self.attnames = [field.attname for field in fields]
        self.sql = ", ".join(f"{alias}.{quote(field.column)}" for field in fields)
        self._converters = []
        for index, field in enumerate(fields):
            column = field.get_col(model._meta.db_table)
            found = connection.ops.get_db_converters(column) + column.get_db_converters(connection)
            if found:
                self._converters.append((index, found, column))

    def __len__(self) -> int:
        return len(self.attnames)

    def instance(self, values) -> Model:
        values = list(values)
        connection = connections[self.using]
        for index, converters, column in self._converters:
            for convert in converters:
                values[index] = convert(values[index], column, connection)
        return self.model.from_db(self.using, self.attnames, values)


@cache
def columns(model: type[Model], alias: str, using: str = "default") -> Columns:
    return Columns(model, alias, using)


# --- PostgreSQL: the statements every push runs, prepared on their connection -----------

_prepared_class = None
_NEVER_AUTOMATICALLY = 2**62


def _prepared_cursor_class():
    global _prepared_class
    if _prepared_class is None:
        from django.db.backends.postgresql.base import ServerBindingCursor

        class PreparedCursor(ServerBindingCursor):
            """Binds on the server and prepares every statement it runs (psycopg's ``prepare=True``)."""

            def execute(self, query, params=None, *, prepare=None, binary=None):
                return super().execute(query, params, prepare=True, binary=binary)

            def _send_query_prepared(self, name, pgq, *, binary=None):
                # psycopg keeps the statement (``_query``, which Django's debug cursor
                # logs through ``last_executed_query``) only when it runs it unprepared.
                self._query = pgq
                return super()._send_query_prepared(name, pgq, binary=binary)

        _prepared_class = PreparedCursor
    return _prepared_class


def prepare_enabled() -> bool:
    """``IMPRI_DB_PREPARE`` (default on): off, ``prepared_cursor`` and ``preparing`` prepare nothing.

    For a transaction-pooling PgBouncer older than 1.21, or without
    ``max_prepared_statements``: a statement prepared on one server connection would be
    run on another. Read on every call, so that a test's ``override_settings`` holds.
    """
    return getattr(settings, "IMPRI_DB_PREPARE", True)


def prepared_cursor(connection):
    """A cursor whose statements are prepared on the connection (PostgreSQL); else the usual one.

    For statements of a fixed text that run on every request, with values bound as
    parameters: psycopg keeps each connection's prepared statements (an LRU of 100),
    and PostgreSQL plans one a few times, then keeps its generic plan. One statement per
    ``execute`` (server-side binding refuses several).
    """
    if connection.vendor != "postgresql" or not prepare_enabled():
        return connection.cursor()
    connection.close_if_health_check_failed()
    connection.ensure_connection()
    with connection.wrap_database_errors:
        cursor = _new_prepared(connection)
        return connection._prepare_cursor(cursor)


@contextlib.contextmanager
def preparing(connection):
    """In this block, the connection's unnamed cursors prepare their statements (PostgreSQL).

    For an ORM write whose SQL is the same every time (``Model.save(force_insert=True)``
    of the same fields): Django still writes the statement, and its debug cursor and
    ``execute_wrapper`` hooks still see it; only the binding moves to the server. The
    block must run on the connection's own thread (as every use of a connection does).
    """
    connection = connections[connection.alias]  # the thread's wrapper, not django.db's proxy
    if (
        connection.vendor != "postgresql"
        or "create_cursor" in vars(connection)
        or not prepare_enabled()
    ):
        yield  # SQLite, or a block inside another: the outer one gives the cursors back
        return
    connection.ensure_connection()
    own = connection.create_cursor

    def create_cursor(name=None):
        if name:
            return own(name)
        return _new_prepared(connection)

    connection.create_cursor = create_cursor
    try:
        yield
    finally:
        del connection.create_cursor  # back to the class's


def _new_prepared(connection):
    from django.db.backends.postgresql import base as postgresql

    raw = connection.connection
    if raw.prepare_threshold is None:
        # Django leaves psycopg's automatic preparing off (None), which also refuses an
        # explicit ``prepare=True``. Its own cursors bind on the client and never prepare,
        # so a threshold nobody reaches turns on only the statements asked for here.
        raw.prepare_threshold = _NEVER_AUTOMATICALLY
    cursor = _prepared_cursor_class()(raw)
    # What create_cursor does for an unnamed cursor after making it.
    tzloader = raw.adapters.get_loader(postgresql.TIMESTAMPTZ_OID, postgresql.Format.TEXT)
    if connection.timezone != tzloader.timezone:
        postgresql.register_tzloader(connection.timezone, cursor)
    return cursor
