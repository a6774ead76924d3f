from __future__ import annotations

import getpass
import os
import sys

from django.conf import settings
from django.contrib.auth import get_user_model, password_validation
from django.contrib.auth.models import Group
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

PASSWORD_ENV = "IMPRI_REVIEWER_PASSWORD"


class Command(BaseCommand):
    help = (
        "Create a reviewer (or update one) and put them in a reviewer group. The inbox "
        f"password comes from --password-prompt, --password-file or {PASSWORD_ENV}; "
        "without one the reviewer can only use tokens."
    )

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument(
            "--password-prompt",
            action="store_true",
            help="Ask for the password on the terminal (typed twice, not echoed).",
        )
        parser.add_argument(
            "--password-file",
            help="Read the password from this file (its first line); '-' reads standard input.",
        )
        parser.add_argument(
            "--password",
            help="Deprecated: visible in the process list and shell history; "
            f"use --password-prompt, --password-file or {PASSWORD_ENV}.",
        )
        parser.add_argument("--email", default="")
        parser.add_argument(
            "--group",
            action="append",
            dest="groups",
            help=f"Reviewer group (repeatable). Default: {settings.IMPRI_DEFAULT_GROUP}.",
        )

    def handle(self, *args, username: str, email: str, groups: list[str] | None, **options):
        password = self._password(options)
        User = get_user_model()
        user = User.objects.filter(username=username).first() or User(username=username)
        created = user.pk is None
        if created:
            user.email = email
        if password:
            try:
                password_validation.validate_password(password, user)
            except ValidationError as exc:
                raise CommandError("password refused: " + " ".join(exc.messages)) from None
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

    def _password(self, options) -> str | None:
        if options["password"]:
            self.stderr.write(
                "warning: --password shows the password to anyone who can list processes "
                f"and keeps it in shell history; use --password-prompt, --password-file "
                f"or {PASSWORD_ENV}"
            )
            return options["password"]
        if options["password_file"]:
            path = options["password_file"]
            text = sys.stdin.read() if path == "-" else _read(path)
            return text.splitlines()[0] if text.strip() else None
        if options["password_prompt"]:
            if not sys.stdin.isatty():  # docker exec without -t, CI: getpass would end in EOFError
                raise CommandError(
                    "--password-prompt needs a terminal; without one use --password-file PATH "
                    f"('-' reads standard input) or set {PASSWORD_ENV}",
                    returncode=2,
                )
            first = getpass.getpass("Password: ")
            if first != getpass.getpass("Password (again): "):
                raise CommandError("the passwords differ")
            return first or None
        return os.environ.get(PASSWORD_ENV) or None


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except OSError as exc:
        raise CommandError(f"--password-file: {exc.strerror}: {path}") from None
