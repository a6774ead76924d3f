"""``impri backup``: a consistent copy of the SQLite database, taken while Impri runs."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from impri import storage


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
        try:
            size = storage.backup_sqlite(target)
        except (OSError, sqlite3.Error) as exc:
            raise CommandError(f"backup failed: {exc}") from None
        key_file = settings.DATA_DIR / "secret_key"
        if key_file.exists():
            self.stderr.write(
                f"Keep {key_file} with the backup too: sessions and audit checkpoints are signed with it."
            )
        self.stdout.write(f"Backed up {size} bytes to {target}")
