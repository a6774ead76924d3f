"""Where the data lives: the start-up line of long-running commands, and SQLite backups."""

from __future__ import annotations

import os
import sqlite3
import tempfile
from pathlib import Path

from django.conf import settings


def describe() -> str:
    """One line: the data directory and the database (a PostgreSQL URL without its password)."""
    db = settings.DATABASES["default"]
    if db["ENGINE"].endswith("sqlite3"):
        database = f"SQLite {db['NAME']}"
    else:
        user = f"{db.get('USER')}@" if db.get("USER") else ""
        port = f":{db['PORT']}" if db.get("PORT") else ""
        database = f"PostgreSQL {user}{db.get('HOST') or 'localhost'}{port}/{db['NAME']}"
    channels = "Redis" if settings.REDIS_URL else "in-memory"
    return f"data directory {settings.DATA_DIR}; database {database}; channel layer {channels}"


def is_sqlite() -> bool:
    return settings.DATABASES["default"]["ENGINE"].endswith("sqlite3")


def backup_sqlite(target: Path, progress=None) -> int:
    """Copy the live SQLite database to ``target`` with SQLite's online backup API.

    The copy is consistent even while ``impri serve`` writes (the backup restarts
    on its own if a page it copied changes). It is written to a temporary file
    beside ``target``, created 0600 (the database holds hashed keys and secrets),
    and renamed into place once it checks out: ``target`` is never half a copy.
    ``target``'s directory must exist. Returns the size of the copy.
    """
    source = Path(settings.DATABASES["default"]["NAME"])
    if not source.exists():
        raise FileNotFoundError(f"no database at {source}")
    fd, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".partial")
    os.close(fd)  # mkstemp made it 0600; SQLite writes into the empty file
    partial = Path(name)
    try:
        _copy(source, partial, progress)
        partial.replace(target)
    finally:
        partial.unlink(missing_ok=True)
    return target.stat().st_size


def _copy(source: Path, partial: Path, progress) -> None:
    src = sqlite3.connect(source, timeout=20)
    try:
        dst = sqlite3.connect(partial)
        try:
            if progress is None:
                src.backup(dst)
            else:  # progress(pages copied, pages in all), every 256 pages
                src.backup(
                    dst, pages=256, progress=lambda _, left, total: progress(total - left, total)
                )
            # A restore is a copy of one file: no WAL beside it.
            dst.execute("PRAGMA journal_mode=DELETE")
            if dst.execute("PRAGMA integrity_check").fetchone()[0] != "ok":
                raise sqlite3.DatabaseError(f"the copy at {partial} failed its integrity check")
        finally:
            dst.close()
    finally:
        src.close()
