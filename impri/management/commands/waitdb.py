"""``impri waitdb``: block until the database (and Redis, when configured) answer.

The image's start script runs it before serve, worker, beat and migrate, so
that a stack whose database starts slower than Impri neither crash-loops nor
prints a traceback: one line per attempt, one line when it gives up.
"""

from __future__ import annotations

import time

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import connection

from impri import storage


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
        deadline = time.monotonic() + timeout
        checks = [("database", _database)] + ([("Redis", _redis)] if settings.REDIS_URL else [])
        for name, check in checks:
            while True:
                error = check()
                if error is None:
                    break
                if time.monotonic() >= deadline:
                    raise CommandError(f"{name} not reachable after {timeout:g}s: {error}")
                self.stderr.write(f"impri: waiting for the {name}: {error}")
                time.sleep(1)
        self.stderr.write(f"impri: ready ({storage.describe()})")


def _one_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


def _database() -> str | None:
    try:
        connection.ensure_connection()
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception as exc:
        connection.close()
        return _one_line(exc)
    connection.close()
    return None


def _redis() -> str | None:
    import redis

    try:
        redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=2, socket_timeout=2).ping()
    except Exception as exc:
        return _one_line(exc)
    return None
