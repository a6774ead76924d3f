from __future__ import annotations

import sys

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from delivery import retention
from plumbing.progress import Progress


class Command(BaseCommand):
    help = (
        "Delete delivered webhooks (and their attempts), notifications and budget windows "
        "older than IMPRI_RETENTION_DAYS now (beat and `impri serve` do it hourly). "
        "Never the audit log."
    )
    requires_system_checks = []  # a one-shot command: serve, worker and `impri check` run them

    def add_arguments(self, parser):
        parser.add_argument(
            "--days", type=int, default=None, help="this retention instead of IMPRI_RETENTION_DAYS"
        )

    def handle(self, *args, days: int | None, **options):
        if days is not None and days < 1:
            raise CommandError("--days must be at least 1")
        days = settings.IMPRI_RETENTION_DAYS if days is None else days
        if not days:
            self.stdout.write("IMPRI_RETENTION_DAYS is 0: history is kept, nothing pruned.")
            return
        bar = Progress("pruning deliveries and notifications", 0, sys.stderr)

        def deleted(count: int, in_all: int) -> None:
            bar.total = in_all
            bar.advance(count - bar.done)

        with bar:
            done = retention.prune(days=days, progress=deleted)
        summary = ", ".join(f"{n} {what.replace('_', ' ')}" for what, n in done.items())
        self.stdout.write(f"Pruned what is older than {days} days: {summary}.")
