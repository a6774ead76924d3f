from __future__ import annotations

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.db import IntegrityError

from approvals.models import Agent
from identity import keys


class Command(BaseCommand):
    help = (
        "Create an agent and print its key (shown once). For an existing agent: "
        "--rotate (a new key, the old ones revoked) or --new-key (another key)."
    )
    requires_system_checks = []  # a one-shot command: serve, worker and `impri check` run them

    def add_arguments(self, parser):
        parser.add_argument("name", help="A slug of at most 100 characters, e.g. support-bot.")
        parser.add_argument("--description", default="")
        keyed = parser.add_mutually_exclusive_group()
        keyed.add_argument(
            "--rotate",
            action="store_true",
            help="Issue a new key for an existing agent and revoke its other keys.",
        )
        keyed.add_argument(
            "--new-key", action="store_true", help="Issue another key for an existing agent."
        )

    def handle(self, *args, name: str, description: str, rotate: bool, new_key: bool, **options):
        if rotate or new_key:
            agent = Agent.objects.filter(name=name).first()
            if agent is None:
                raise CommandError(f"no agent named {name!r} (create it: impri createagent {name})")
            issue = keys.rotate_agent_key if rotate else keys.create_agent_key
            _, raw = issue(agent, by="cli")
        else:
            agent, raw = self._create(name, description)
        self.stdout.write(
            f"Agent {agent.name} is ready. Store this key now; it is shown only once."
        )
        self.stdout.write(f"Agent key: {raw}")

    def _create(self, name: str, description: str) -> tuple[Agent, str]:
        if Agent.objects.filter(name=name).exists():
            raise CommandError(
                f"an agent named {name!r} already exists: nothing changed (--rotate issues "
                "a new key and revokes the old ones; --new-key adds one)"
            )
        try:
            return keys.create_agent(name, description=description)
        except ValidationError as exc:
            raise CommandError(f"agent name {exc.messages[0]}") from None
        except IntegrityError:  # created by someone else since the check above
            raise CommandError(f"an agent named {name!r} already exists: nothing changed") from None
