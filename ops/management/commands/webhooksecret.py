from __future__ import annotations

import getpass

from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from approvals.models import Agent, new_webhook_secret
from audit.identity import changes_from


class Command(BaseCommand):
    help = (
        "Print the whsec_ secret that signs an agent's webhooks (Standard Webhooks), on the "
        "last line. --rotate replaces it (audited): deliveries from then on are signed with "
        "the new one only."
    )
    requires_system_checks = []  # a one-shot command: serve, worker and `impri check` run them

    def add_arguments(self, parser):
        parser.add_argument("agent", help="The agent's name (impri agents).")
        parser.add_argument(
            "--rotate", action="store_true", help="Replace the secret and print the new one."
        )

    def handle(self, *args, agent: str, rotate: bool, **options):
        found = Agent.objects.filter(name=agent).first()
        if found is None:
            raise CommandError(f"no agent named {agent!r} (impri agents lists them)")
        if rotate:
            # The save appends agent.webhook_secret_rotated (audit.identity), never the secret.
            with changes_from(f"cli:{getpass.getuser()}"), transaction.atomic():
                found = Agent.objects.select_for_update().get(pk=found.pk)
                found.webhook_secret = new_webhook_secret()
                found.save(update_fields=["webhook_secret"])
            self.stderr.write(
                f"Webhook secret of {found.name} replaced: deliveries are signed with the new "
                "one from now on (the old one no longer verifies). Give it to the receiver."
            )
        self.stdout.write(found.webhook_secret)
