"""The database settings: PostgreSQL from ``DATABASE_URL``, else SQLite in the data directory.

Any other URL (``mysql://``, a typo) is one ``ImproperlyConfigured`` naming the variable and
what to write instead, never a traceback at the first query.
"""

from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from impri.settings_env import private, without_password


def databases(url: str, data_dir: Path, pool_size: int, pool_timeout_s: float) -> dict:
    if url:
        config = database("DATABASE_URL", url)
        if pool_size:
            # Django 5.2's psycopg pool: a thread borrows a connection and gives it
            # back when Django closes it (end of request, end of a dbexec call).
            config.setdefault("OPTIONS", {})["pool"] = {
                "min_size": 1,
                "max_size": pool_size,
                "timeout": pool_timeout_s,
            }
        return {"default": config}
    # SQLite creates its -wal and -shm files with the database file's mode.
    private(data_dir, 0o700, directory=True)
    private(data_dir / "impri.sqlite3", 0o600)
    return {
        "default": {
            # Django's own SQLite backend, with its documented options (Django 5.1+).
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": data_dir / "impri.sqlite3",
            # Two processes (daphne and a stdio MCP server) share this file:
            # WAL lets readers run beside the writer, IMMEDIATE takes the write
            # lock at BEGIN so a transaction never fails half-way on upgrade,
            # and the timeout (SQLite's busy timeout, in seconds) makes writers
            # queue instead of failing.
            "OPTIONS": {
                "transaction_mode": "IMMEDIATE",
                "timeout": 20,
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            },
            "TEST": {"NAME": str(test_database(data_dir))},
        }
    }


def test_database(data_dir: Path) -> Path:
    """The suite's SQLite database: in the temporary directory, never inside a live data dir.

    One per data directory (the suite's runs against one data dir reuse it, two checkouts'
    runs don't collide), and a test run never writes beside a server's ``impri.sqlite3``.
    """
    tag = hashlib.sha256(str(data_dir).encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"impri-test-{tag}.sqlite3"


def database(name: str, url: str) -> dict:
    """Django's DATABASES entry for a ``postgres://`` URL; any other URL is one clear error."""

    shown = without_password(url)
    try:
        config = dj_database_url.parse(url, conn_max_age=0)
    except ValueError as exc:  # dj_database_url's UnknownSchemeError is a ValueError
        raise ImproperlyConfigured(
            f"{name} is not a database URL ({shown!r}: {str(exc).split('.')[0]}). Write it as "
            f"postgres://USER:PASSWORD@HOST:5432/NAME, or unset {name} to use SQLite in "
            "IMPRI_DATA_DIR"
        ) from None
    if config.get("ENGINE") != "django.db.backends.postgresql":
        scheme = url.partition(":")[0]
        raise ImproperlyConfigured(
            f"{name}: Impri runs on PostgreSQL (postgres://USER:PASSWORD@HOST:5432/NAME), not "
            f"{scheme}://; unset {name} to use SQLite in IMPRI_DATA_DIR"
        )
    if not config.get("NAME"):
        raise ImproperlyConfigured(
            f"{name} ({shown!r}) names no database: end it with /NAME, e.g. "
            "postgres://impri:PASSWORD@localhost:5432/impri"
        )
    return config
