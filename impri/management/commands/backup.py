"""``impri backup``: a consistent copy of the SQLite database, taken while Impri runs."""

from __future__ import annotations

import sqlite3
import sys
from datetime import UTC, datetime
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from approvals import grants
from impri import storage
from plumbing.progress import Progress


class Command(BaseCommand):
    help = "Back up the SQLite database online (SQLite's backup API); PostgreSQL: use pg_dump."
    requires_system_checks = []  # a one-shot command: serve, worker and `impri check` run them

    def add_arguments(self, parser):
        parser.add_argument(
            "path",
            nargs="?",
            help="The file to write, or an existing directory to write impri-<time>.sqlite3 "
            "in (default: IMPRI_DATA_DIR/backups/). The directory must exist.",
        )

    def handle(self, *args, path: str | None, **options):
        if not storage.is_sqlite():
            raise CommandError(
                "the database is PostgreSQL: back it up with pg_dump "
                '(pg_dump --format=custom "$DATABASE_URL" > impri.dump; see docs/operations.md)'
            )
        target = _target(path)
        bar = Progress("backing up (pages)", 0, sys.stderr)

        def copied(done: int, total: int) -> None:
            bar.total = total
            bar.advance(done - bar.done)

        try:
            with bar:
                size = storage.backup_sqlite(target, progress=copied)
        except (OSError, sqlite3.Error) as exc:
            raise CommandError(f"backup failed: {exc}") from None
        keys = [p for p in (settings.DATA_DIR / "secret_key", grants.key_dir()) if p.exists()]
        if keys:
            self.stderr.write(
                f"Keep {' and '.join(map(str, keys))} with the backup too: sessions, audit "
                "checkpoints and approval grants are signed with them (docs/operations.md)."
            )
        self.stdout.write(f"Backed up {size} bytes to {target}")


def _target(path: str | None) -> Path:
    """The file to write: PATH, or a timestamped name inside PATH (or the data directory's backups/).

    A missing directory is refused rather than made: a typo in a cron line should fail
    loudly, not fill a new tree nobody watches.
    """
    name = f"impri-{datetime.now(UTC):%Y%m%d-%H%M%S}.sqlite3"
    if path is None:
        backups = settings.DATA_DIR / "backups"
        backups.mkdir(mode=0o700, exist_ok=True)
        return backups / name
    target = Path(path).expanduser().resolve()
    if target.is_dir():
        return target / name
    if path.endswith("/"):
        raise CommandError(f"no directory {target}: create it first, or name a file to write")
    if not target.parent.is_dir():
        raise CommandError(
            f"no directory {target.parent}: create it first (impri backup makes none)"
        )
    if target == Path(settings.DATABASES["default"]["NAME"]).resolve():
        raise CommandError(f"{target} is the live database: write the backup somewhere else")
    return target
