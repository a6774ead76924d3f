"""Personas and helpers shared by the suite.

The embedded defaults are the test configuration; CI runs the same suite
again with DATABASE_URL and REDIS_URL pointing at PostgreSQL and Redis.
"""

from __future__ import annotations

import inspect
import json
import os
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from asgiref.sync import SyncToAsync
from django.conf import settings
from django.contrib.auth.models import Group, User
from django.db import connections
from django.test import Client

from approvals import group_cache
from approvals.models import Agent
from audit import guards
from identity import keys

SCALED = bool(settings.DATABASE_URL)

# --- The suite's subprocesses keep their bytecode -----------------------------------------
# The suite starts several hundred Pythons (`impri serve`, `impri createreviewer`...). Where
# PYTHONDONTWRITEBYTECODE is set (this machine's image sets it), each compiled Impri's
# modules again at every start, about 0.3 s of CPU apiece. They keep it instead in a folder
# of the user's own cache that every run shares (PYTHONPYCACHEPREFIX), never in the checkout
# nor where another user could write it; xdist's workers, started after this, do as well.
if os.environ.pop("PYTHONDONTWRITEBYTECODE", None):
    _PYCACHE = Path.home() / ".cache" / "impri-tests" / "pycache"
    _PYCACHE.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.environ["PYTHONPYCACHEPREFIX"] = str(_PYCACHE)


# --- Parallel workers (pytest-xdist, `-n 4` in the README's command) ----------------------
# Each worker is a process of its own: pytest-django gives it its own test database
# (`test_<name>_gw0`, the SQLite file with `_gw0` after its name), tests/live.py gives each
# deployment a fresh database, data dir and free ports, and here each worker gets its own
# keys in the shared Redis (IMPRI_REDIS_PREFIX's keys, set before the channel layer, the cache
# or Celery's connection is first built), so no worker sees another's wake-ups, rate
# counts or tasks. Tests that share an expensive module fixture (a live deployment) stay on
# one worker together: `--dist loadfile`.
XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")


def pytest_configure(config):
    if not XDIST_WORKER:
        return
    keys = settings.CACHES.get("keys", {})
    if keys.get("BACKEND", "").endswith("FileBasedCache"):
        # The key check's generation (identity.keys) in a file: one per worker, or a key
        # another worker saves makes this one's cached keys stale mid-test.
        keys["LOCATION"] = f"{keys['LOCATION']}-{XDIST_WORKER}"
    if not settings.REDIS_URL:
        return
    prefix = f"{settings.IMPRI_REDIS_PREFIX}test-{XDIST_WORKER}:"
    settings.IMPRI_REDIS_PREFIX = prefix
    for layer in settings.CHANNEL_LAYERS.values():
        layer["CONFIG"]["prefix"] = prefix + "asgi"
    for cache in settings.CACHES.values():
        cache["KEY_PREFIX"] = prefix + "impri"
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = {
        **settings.CELERY_BROKER_TRANSPORT_OPTIONS,
        "global_keyprefix": prefix,
    }


# --- The suite's own way around the audit log's append-only triggers ----------------
# Django empties the tables after each transactional test (its flush: TRUNCATE on
# PostgreSQL, DELETE on SQLite), which the triggers refuse. Only that teardown lifts them,
# for its own statements, and puts them back: the test itself ran with them on, and no
# application code path can lift them. (pytest's teardown phase runs pytest-django's
# TransactionTestCase teardown, where the flush is; no Django method is replaced.)


def _lift_audit_guards(connection) -> None:
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            for table in guards.GUARDED_TABLES:
                cursor.execute(f"ALTER TABLE {table} DISABLE TRIGGER USER")
        else:
            for name in guards.SQLITE_TRIGGERS:
                cursor.execute(f"DROP TRIGGER IF EXISTS {name}")


def _restore_audit_guards(connection) -> None:
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            for table in guards.GUARDED_TABLES:
                cursor.execute(f"ALTER TABLE {table} ENABLE TRIGGER USER")
        else:
            for statement in guards.SQLITE_TRIGGERS.values():
                cursor.execute(statement)


@contextmanager
def _audit_guards_lifted(connection):
    """The triggers off for the block's statements (tests that play the attacker use it too)."""
    _lift_audit_guards(connection)
    try:
        yield
    finally:
        _restore_audit_guards(connection)


def _flushes_after(item) -> bool:
    """Whether pytest-django empties the tables after this test (a transactional test)."""
    if {"transactional_db", "live_server"} & set(getattr(item, "fixturenames", ())):
        return True
    marker = item.get_closest_marker("django_db")
    return bool(marker and (marker.kwargs.get("transaction") or marker.args[:1] == (True,)))


_DB_BLOCKER = pytest.StashKey()


@pytest.fixture(autouse=True)
def _db_blocker_for_teardown(request, django_db_blocker):
    request.node.stash[_DB_BLOCKER] = django_db_blocker


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    blocker = item.stash.get(_DB_BLOCKER, None)
    if blocker is None or not _flushes_after(item):
        return (yield)
    with blocker.unblock():
        _lift_audit_guards(connections["default"])
    try:
        return (yield)
    finally:
        if nextitem is not None:  # after the last test the session's teardown dropped the database
            with blocker.unblock():
                _restore_audit_guards(connections["default"])


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
def _no_groups_from_an_earlier_test():
    """The groups this process read (approvals.group_cache) went with the last test's
    database: emptying it between tests sends no signal, so the process forgets them here."""
    group_cache.forget()


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


# Under xdist (`--dist loadgroup`), an e2e module's tests run on one worker, in order: they
# share its module fixtures (a live deployment, a browser), which another worker would start
# again. xdist sends the biggest groups first; the fast tests, one by one, fill in after.
# (tryfirst: xdist reads the marks in its own hook.)
@pytest.hookimpl(tryfirst=True)
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
        if item.get_closest_marker("e2e") is not None:
            item.add_marker(pytest.mark.xdist_group(module.__name__))


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
