from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError
from django.db import IntegrityError

from approvals.models import Agent
from identity import keys


class Command(BaseCommand):
    help = "Create an agent and print its key (shown once). With --new-key, add a key to an existing agent."

    def add_arguments(self, parser):
        parser.add_argument("name")
        parser.add_argument("--description", default="")
        parser.add_argument(
            "--new-key", action="store_true", help="Issue another key for an existing agent."
        )

    def handle(self, *args, name: str, description: str, new_key: bool, **options):
        if new_key:
            agent = Agent.objects.filter(name=name).first()
            if agent is None:
                raise CommandError(f"no agent named {name!r}")
            _, raw = keys.create_agent_key(agent, by="cli")
        else:
            try:
                agent, raw = keys.create_agent(name, description=description)
            except IntegrityError:
                raise CommandError(
                    f"an agent named {name!r} already exists (use --new-key)"
                ) from None
        self.stdout.write(
            f"Agent {agent.name} is ready. Store this key now; it is shown only once."
        )
        self.stdout.write(f"Agent key: {raw}")
