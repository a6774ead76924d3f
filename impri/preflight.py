"""What a process checks before it starts work, each problem as one line an operator can act on.

``impri serve`` waits for an unreachable database for ``IMPRI_DB_WAIT_S`` (one line per
attempt) and then exits non-zero; ``impri waitdb`` (the image's start script) does the same
for the database and Redis. An unreachable Redis or a malformed ``IMPRI_BASE_URL`` are
warnings when a server starts: Impri runs without them, worse (docs/operations.md).
Any command that cannot connect to the database says so in one line (impri.cli).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from urllib.parse import urlsplit

import redis
from django.conf import settings
from django.db import connection

from impri import storage


def one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


def database_error() -> str | None:
    """None when the database answers; else why not, in one line.

    PostgreSQL is asked on a connection of its own, outside the pool: the pool would wait
    its whole timeout for a connection, and log each of its own retries.
    """
    if connection.vendor == "postgresql":
        params = {"connect_timeout": 5, **connection.get_connection_params()}
        try:
            connection.Database.connect(**params).close()
        except Exception as exc:
            return one_line(exc)
        return None
    try:
        connection.ensure_connection()
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception as exc:
        connection.close()
        return one_line(exc)
    connection.close()
    return None


def redis_error() -> str | None:

    try:
        redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=2, socket_timeout=2).ping()
    except Exception as exc:
        return one_line(exc)
    return None


def wait_for(
    name: str, check: Callable[[], str | None], timeout: float, write: Callable[[str], None]
) -> str | None:
    """Call ``check`` once a second until it passes (None) or ``timeout`` s have gone by.

    Returns None, or the last error; one line per failed attempt goes to ``write``.
    """
    deadline = time.monotonic() + timeout
    while True:
        error = check()
        if error is None:
            return None
        if time.monotonic() >= deadline:
            return error
        write(f"impri: waiting for the {name}: {error}")
        time.sleep(1)


def where(name: str) -> str:
    if name == "Redis":
        return "REDIS_URL"
    return storage.describe().split("; ")[1].removeprefix("database ")


def unreachable(name: str, timeout: float, error: str) -> str:
    variable = "REDIS_URL" if name == "Redis" else "DATABASE_URL"
    return (
        f"{name} not reachable after {timeout:g}s: {error} ({where(name)}). Start it or fix "
        f"{variable}; IMPRI_DB_WAIT_S sets how long to wait"
    )


def connection_failed(exc: BaseException) -> str | None:
    """One line for a command whose database connection failed, else None (not a connection error)."""
    if connection.connection is not None:  # connected: the error is about a query
        return None
    if settings.DATABASE_URL:
        hint = "Is PostgreSQL running, and is DATABASE_URL right? (`impri waitdb` waits for it)"
    else:
        hint = "Is IMPRI_DATA_DIR right, and writable by this user?"
    return f"cannot connect to the database ({where('database')}): {one_line(exc)}. {hint}"


def start_warnings() -> list[str]:
    """A server's start-up warnings: what runs degraded, and what to do about it."""
    found = []
    if settings.REDIS_URL:
        error = redis_error()
        if error:
            found.append(
                f"Redis at REDIS_URL is not reachable ({error}): wake-ups between processes "
                "and queued tasks wait for it, and the rate limiter counts per process. "
                "Start Redis or fix REDIS_URL"
            )
    base = settings.IMPRI_BASE_URL
    if base:
        problem = base_url_problem(base)
        if problem:
            found.append(
                f"IMPRI_BASE_URL {base!r} {problem}: the links in notifications and "
                "webhooks will be wrong. Set it to the address reviewers open, e.g. "
                "https://impri.example.com"
            )
    return found


def base_url_problem(base: str) -> str | None:
    try:
        parts = urlsplit(base)
        parts.port  # noqa: B018  (a bad port raises)
    except ValueError as exc:
        return f"is not a URL ({exc})"
    if parts.scheme not in ("http", "https"):
        return "does not start with http:// or https://"
    if not parts.hostname:
        return "has no host"
    if parts.query or parts.fragment:
        return "has a query or fragment"
    return None
