"""Personas and helpers shared by the suite.

The embedded defaults are the test configuration; CI runs the same suite
again with DATABASE_URL and REDIS_URL pointing at PostgreSQL and Redis.
"""

from __future__ import annotations

import inspect
import json
from contextlib import contextmanager
from dataclasses import dataclass

import pytest
from asgiref.sync import SyncToAsync
from django.conf import settings
from django.contrib.auth.models import Group, User
from django.core.management.color import no_style
from django.db import connections
from django.db.backends.base.operations import BaseDatabaseOperations
from django.test import Client, TransactionTestCase

from approvals.models import Agent
from audit import guards
from identity import keys

SCALED = bool(settings.DATABASE_URL)


# --- The suite's own way around the audit log's append-only triggers ----------------
# Django empties the tables between transactional tests (TRUNCATE on PostgreSQL,
# DELETE on SQLite), which the triggers refuse. Only this flush lifts them, for
# its own statements, and puts them back; no application code path can.


@contextmanager
def _audit_guards_lifted(connection):
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            for table in guards.GUARDED_TABLES:
                cursor.execute(f"ALTER TABLE {table} DISABLE TRIGGER USER")
        else:
            for name in guards.SQLITE_TRIGGERS:
                cursor.execute(f"DROP TRIGGER IF EXISTS {name}")
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            if connection.vendor == "postgresql":
                for table in guards.GUARDED_TABLES:
                    cursor.execute(f"ALTER TABLE {table} ENABLE TRIGGER USER")
            else:
                for statement in guards.SQLITE_TRIGGERS.values():
                    cursor.execute(statement)


_flush = BaseDatabaseOperations.execute_sql_flush


def _flush_around_audit_guards(self, sql_list):
    with _audit_guards_lifted(self.connection):
        _flush(self, sql_list)


BaseDatabaseOperations.execute_sql_flush = _flush_around_audit_guards


# --- Transactional tests empty the tables, not the rows migrations made -------------
# Django's flush empties every table and then replays post_migrate, which re-creates the
# content types and permissions the migrations made: about a fifth of the fast loop's time
# spent rebuilding rows nothing changed. Those two tables are kept instead (their ids stay
# the same, so ContentType's cache stays true); every other table is emptied as before.
# Nothing else in the project listens to post_migrate.
KEPT_BY_FLUSH = frozenset({"django_content_type", "auth_permission"})
_fixture_teardown = TransactionTestCase._fixture_teardown


def _flush_keeping_migration_rows(self):
    if self.available_apps is not None or self.serialized_rollback:
        return _fixture_teardown(self)
    for alias in self._databases_names(include_mirrors=False):
        connection = connections[alias]
        tables = [
            table
            for table in connection.introspection.django_table_names(
                only_existing=True, include_views=False
            )
            if table not in KEPT_BY_FLUSH
        ]
        connection.ops.execute_sql_flush(
            connection.ops.sql_flush(no_style(), tables, reset_sequences=False)
        )


TransactionTestCase._fixture_teardown = _flush_keeping_migration_rows


@dataclass
class Persona:
    """Somebody who calls the API: an agent with a key or a reviewer with a token."""

    key: str
    agent: Agent | None = None
    user: User | None = None

    def client(self) -> ApiClient:
        return ApiClient(self.key)


class ApiClient:
    """Django's test client speaking JSON with a bearer key, through the full middleware stack."""

    def __init__(self, key: str | None):
        self.client = Client()
        self.headers = {"Authorization": f"Bearer {key}"} if key else {}

    def get(self, path: str, **params):
        return self.client.get("/api/v1" + path, params, headers=self.headers)

    def post(self, path: str, body=None, headers: dict | None = None):
        data = (
            body if isinstance(body, str | bytes) else json.dumps(body if body is not None else {})
        )
        return self.client.post(
            "/api/v1" + path,
            data,
            content_type="application/json",
            headers={**self.headers, **(headers or {})},
        )


def make_agent(name: str) -> Persona:
    agent, raw = keys.create_agent(name)
    return Persona(key=raw, agent=agent)


def make_reviewer(username: str, *groups: str) -> Persona:
    user = User.objects.create_user(username, password=f"{username}-password")
    for name in groups:
        user.groups.add(Group.objects.get_or_create(name=name)[0])
    _, raw = keys.create_reviewer_token(user)
    return Persona(key=raw, user=user)


@pytest.fixture
def agent(db) -> Persona:
    return make_agent("support-bot")


@pytest.fixture
def other_agent(db) -> Persona:
    return make_agent("other-bot")


@pytest.fixture
def rita(db) -> Persona:
    """A reviewer in the default group."""
    return make_reviewer("rita", settings.IMPRI_DEFAULT_GROUP)


@pytest.fixture
def sam(db) -> Persona:
    """A second reviewer in the default group."""
    return make_reviewer("sam", settings.IMPRI_DEFAULT_GROUP)


@pytest.fixture
def mallory(db) -> Persona:
    """A user with a valid token who reviews for no group that actions are routed to."""
    return make_reviewer("mallory", "marketing")


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):
    # Personas get real passwords; PBKDF2's deliberate slowness buys nothing in tests.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    # Every test Client loads the middleware afresh, and WhiteNoise would index every static
    # file (the admin's included) each time: look files up per request instead, as in DEBUG.
    # Live servers (e2e) serve with the index as in production.
    settings.WHITENOISE_AUTOREFRESH = True


@pytest.fixture(autouse=True)
def _async_tests_leave_no_connection(request):
    """An async test's ``sync_to_async`` calls ran on asgiref's one sync thread: close its connection.

    Left open, it outlives the session and PostgreSQL refuses to drop the test
    database ("being accessed by other users").
    """
    yield
    if inspect.iscoroutinefunction(getattr(request, "function", None)):
        SyncToAsync.single_thread_executor.submit(connections.close_all).result()


@pytest.fixture
def hosts(monkeypatch):
    """Names with answers of their own, like lines in a hosts file: ``hosts["x.test"] = ["…"]``.

    Only the outbound guard's resolver sees them (plumbing.outbound.getaddrinfo);
    other names go to the system resolver. No query leaves the machine for these.
    """
    import socket

    from plumbing import outbound

    table: dict[str, list[str]] = {}
    system = outbound.getaddrinfo

    def getaddrinfo(host, port, *args, **kwargs):
        name = str(host).lower().rstrip(".")
        if name not in table:
            return system(host, port, *args, **kwargs)
        if not table[name]:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [
            (
                socket.AF_INET6 if ":" in ip else socket.AF_INET,
                socket.SOCK_STREAM,
                socket.IPPROTO_TCP,
                "",
                (ip, port, 0, 0) if ":" in ip else (ip, port),
            )
            for ip in table[name]
        ]

    monkeypatch.setattr(outbound, "getaddrinfo", getaddrinfo)
    return table


# --- The fast inner loop: `pytest -m "not e2e"` -----------------------------------------
# A test that starts servers, subprocesses or a browser is `e2e`. Modules that import
# the live-server helpers or Playwright are marked whole, here, so a new test there is
# marked without anyone remembering; any other test that starts a process without the
# mark fails at that moment (the tripwire below), naming the mark it needs.

# What a module uses to start servers or a browser (the offline helpers beside them don't count).
E2E_MODULES = ("playwright", "mcp.client.stdio")


def _starts_processes(module) -> bool:
    from tests import client_helpers, live

    starters = (live.Deployment, live.Server, client_helpers.start_live)
    for value in vars(module).values():
        if any(value is starter for starter in starters):
            return True
        origin = getattr(value, "__module__", None)
        if isinstance(origin, str) and origin.startswith(E2E_MODULES):
            return True
    return False


def pytest_collection_modifyitems(config, items):
    seen: dict[object, bool] = {}
    for item in items:
        module = getattr(item, "module", None)
        if module is None:
            continue
        if module not in seen:
            seen[module] = _starts_processes(module)
        if seen[module] and item.get_closest_marker("e2e") is None:
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(autouse=True)
def _processes_only_in_e2e(request, monkeypatch):
    if request.node.get_closest_marker("e2e") is not None:
        return
    import subprocess

    def refuse(self, args, *rest, **kwargs):
        pytest.fail(
            f"{request.node.nodeid} starts a process ({args!r}): mark it @pytest.mark.e2e "
            "so the fast loop (pytest -m 'not e2e') leaves it out",
            pytrace=False,
        )

    monkeypatch.setattr(subprocess.Popen, "_execute_child", refuse)
