from __future__ import annotations

import os

from django.core.management.base import BaseCommand
from django.db.models import Count, Max, Q

from approvals.models import Agent


def _when(moment) -> str:
    return f"{moment:%Y-%m-%d %H:%M}" if moment else "never"


def _printable(text: str) -> str:
    """A name as it may be shown on a terminal: control characters written out, never sent.

    Names from before they had to be slugs may hold an escape sequence (ESC [ 2 J...).
    """
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)


class Command(BaseCommand):
    help = "List the agents: name, owners, active keys, created, last used (UTC)."
    requires_system_checks = []  # a one-shot command: serve, worker and `impri check` run them

    def execute(self, *args, **options):
        # Colour only on a terminal (Django's own rule), and never with NO_COLOR set (no-color.org).
        if os.environ.get("NO_COLOR"):
            options["no_color"] = True
        return super().execute(*args, **options)

    def handle(self, *args, **options):
        agents = (
            Agent.objects.order_by("name")
            .annotate(
                active_keys=Count("keys", filter=Q(keys__revoked_at__isnull=True)),
                last_used=Max("keys__last_used_at"),
            )
            .prefetch_related("owners")
        )
        rows = [("NAME", "OWNERS", "KEYS", "CREATED", "LAST USED")]
        for agent in agents:
            owners = _printable(",".join(sorted(o.get_username() for o in agent.owners.all())))
            owners = owners or "-"
            name = _printable(agent.name) + ("" if agent.is_active else " (disabled)")
            rows.append(
                (
                    name,
                    owners,
                    str(agent.active_keys),
                    _when(agent.created_at),
                    _when(agent.last_used),
                )
            )
        if len(rows) == 1:
            self.stderr.write("No agents yet: impri createagent NAME")
            return
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
        heading = self.style.MIGRATE_HEADING if self.stdout.isatty() else str
        for number, row in enumerate(rows):
            cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
            line = "  ".join([*cells, row[-1]])
            self.stdout.write(heading(line) if number == 0 else line)
