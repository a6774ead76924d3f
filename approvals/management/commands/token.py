from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from approvals import keys


class Command(BaseCommand):
    help = "Issue a reviewer token for USERNAME and print it (shown once)."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--label", default="")

    def handle(self, *args, username: str, label: str, **options):
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(
                f"no user named {username!r}; create one with: impri createreviewer {username}"
            )
        _, raw = keys.create_reviewer_token(user, label=label, by="cli")
        self.stdout.write(f"Reviewer token for {username}. Store it now; it is shown only once.")
        self.stdout.write(f"Reviewer token: {raw}")
