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

    def add_arguments(self, parser):
        parser.add_argument(
            "path",
            nargs="?",
            help="Where to write the copy (default: IMPRI_DATA_DIR/backups/impri-<time>.sqlite3).",
        )

    def handle(self, *args, path: str | None, **options):
        if not storage.is_sqlite():
            raise CommandError(
                "the database is PostgreSQL: back it up with pg_dump "
                '(pg_dump --format=custom "$DATABASE_URL" > impri.dump; see docs/operations.md)'
            )
        stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
        target = Path(path) if path else settings.DATA_DIR / "backups" / f"impri-{stamp}.sqlite3"
        target = target.resolve()
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
