from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from identity import keys


class Command(BaseCommand):
    help = "Issue a reviewer token for USERNAME and print it (shown once)."
    requires_system_checks = []  # a one-shot command: serve, worker and `impri check` run them

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--label", default="")
        parser.add_argument(
            "--service",
            action="store_true",
            help="a token for a program, not a person: it can never approve an amount at or "
            "above IMPRI_STEP_UP_CENTS",
        )

    def handle(self, *args, username: str, label: str, service: bool = False, **options):
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(
                f"no user named {username!r}; create one with: impri createreviewer {username}"
            )
        _, raw = keys.create_reviewer_token(user, label=label, by="cli", is_service=service)
        what = "Service token" if service else "Reviewer token"
        self.stdout.write(f"{what} for {username}. Store it now; it is shown only once.")
        self.stdout.write(f"Reviewer token: {raw}")
