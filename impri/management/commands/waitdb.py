"""``impri waitdb``: block until the database (and Redis, when configured) answer.

The image's start script runs it before serve, worker, beat and migrate, so
that a stack whose database starts slower than Impri neither crash-loops nor
prints a traceback: one line per attempt, one line when it gives up.
"""

from __future__ import annotations

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from impri import preflight, storage


class Command(BaseCommand):
    help = "Wait until the database (and Redis, with REDIS_URL) accept connections."
    requires_system_checks = []  # it runs before anything is up: its output is one line per try

    def add_arguments(self, parser):
        parser.add_argument(
            "--timeout",
            type=float,
            default=settings.IMPRI_DB_WAIT_S,
            help="Give up after this many seconds (default: IMPRI_DB_WAIT_S).",
        )

    def handle(self, *args, timeout: float, **options):
        checks = [("database", preflight.database_error)]
        if settings.REDIS_URL:
            checks.append(("Redis", preflight.redis_error))
        for name, check in checks:
            error = preflight.wait_for(name, check, timeout, self.stderr.write)
            if error is not None:
                raise CommandError(preflight.unreachable(name, timeout, error))
        self.stderr.write(f"impri: ready ({storage.describe()})")
