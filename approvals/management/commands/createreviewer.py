from __future__ import annotations

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Create a reviewer (or update one) and put them in a reviewer group."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument(
            "--password",
            help="Password for the inbox; without it the reviewer can only use tokens.",
        )
        parser.add_argument("--email", default="")
        parser.add_argument(
            "--group",
            action="append",
            dest="groups",
            help=f"Reviewer group (repeatable). Default: {settings.IMPRI_DEFAULT_GROUP}.",
        )

    def handle(
        self,
        *args,
        username: str,
        password: str | None,
        email: str,
        groups: list[str] | None,
        **options,
    ):
        user, created = get_user_model().objects.get_or_create(
            username=username, defaults={"email": email}
        )
        if password:
            user.set_password(password)
        elif created:
            user.set_unusable_password()
        user.save()
        names = groups or [settings.IMPRI_DEFAULT_GROUP]
        for name in names:
            group, _ = Group.objects.get_or_create(name=name)
            user.groups.add(group)
        verb = "Created" if created else "Updated"
        self.stdout.write(f"{verb} reviewer {username} in {', '.join(names)}.")
