"""``impri ledger import FILE --format stripe-csv|generic-csv``: a processor's export read
into movements, with a progress bar and a summary (docs/reconciliation.md)."""

from __future__ import annotations

import sys
from collections import Counter

from django.core.management.base import BaseCommand, CommandError

from approvals.errors import ImpriError
from plumbing.progress import Progress

from ... import imports, services
from ...models import Movement


class Command(BaseCommand):
    help = "Reconciliation: import a processor's export (impri ledger import FILE --format ...)."
    requires_system_checks = []  # a one-shot command: serve, worker and `impri check` run them

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="verb", required=True)
        load = sub.add_parser("import", help="record the movements of a CSV export")
        load.add_argument("file")
        load.add_argument("--format", choices=imports.FORMATS, required=True)

    def handle(self, *args, **options):
        try:
            found = imports.rows(options["file"], options["format"])
        except OSError as exc:
            raise CommandError(f"{options['file']}: {exc.strerror or exc}") from None
        except imports.BadRow as exc:
            raise CommandError(f"{options['file']}: {exc}; nothing was recorded") from None
        counts: Counter[str] = Counter()
        with Progress("importing movements", total=len(found), stream=sys.stderr) as bar:
            for item in bar.track(found):
                if Movement.objects.filter(
                    source=item.source, external_id=item.external_id
                ).exists():
                    counts["already recorded"] += 1
                    continue
                try:
                    movement, _ = services.record_movement(item)
                except ImpriError as exc:
                    raise CommandError(f"{item.external_id}: {exc}") from None
                counts["recorded"] += 1
                counts[f"state {movement.state}"] += 1
        states = ", ".join(
            f"{k[6:]} {v}" for k, v in sorted(counts.items()) if k.startswith("state ")
        )
        self.stdout.write(
            f"{len(found)} rows: {counts['recorded']} recorded, "
            f"{counts['already recorded']} already recorded" + (f" ({states})" if states else "")
        )
