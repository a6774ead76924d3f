from __future__ import annotations

from django.core.management.base import BaseCommand
from django.db.models import Count, Max, Q

from approvals.models import Agent


def _when(moment) -> str:
    return f"{moment:%Y-%m-%d %H:%M}" if moment else "never"


class Command(BaseCommand):
    help = "List the agents: name, owners, active keys, created, last used (UTC)."

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
            owners = ",".join(sorted(o.get_username() for o in agent.owners.all())) or "-"
            name = agent.name if agent.is_active else f"{agent.name} (disabled)"
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
        for row in rows:
            cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
            self.stdout.write("  ".join([*cells, row[-1]]))
