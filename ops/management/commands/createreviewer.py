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
PROMPT_ATTEMPTS = 3


class Command(BaseCommand):
    help = (
        "Create a reviewer and put them in a reviewer group. The inbox "
        f"password comes from --password-prompt, --password-file or {PASSWORD_ENV}; "
        "without one the reviewer can only use tokens. An existing user is left as they "
        "are unless --reset-password is given."
    )
    requires_system_checks = []  # a one-shot command: serve, worker and `impri check` run them

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
        parser.add_argument(
            "--reset-password",
            action="store_true",
            help="The user exists: set their new password (and add them to any --group).",
        )
        parser.add_argument("--email", default="")
        parser.add_argument(
            "--group",
            action="append",
            dest="groups",
            help=f"Reviewer group (repeatable). Default: {settings.IMPRI_DEFAULT_GROUP}.",
        )

    def handle(self, *args, username: str, email: str, groups: list[str] | None, **options):
        User = get_user_model()
        user = User.objects.filter(username=username).first() or User(username=username)
        created = user.pk is None
        if not created and not options["reset_password"]:
            raise CommandError(
                f"a user named {username!r} already exists: nothing changed (--reset-password "
                "sets a new password; groups are changed in admin)"
            )
        password = self._password(options, user)
        if not created and not password:
            raise CommandError(
                "--reset-password needs the new password: --password-prompt, --password-file "
                f"PATH or {PASSWORD_ENV}"
            )
        if created:
            user.email = email
        if password:
            _validate(password, user)
            user.set_password(password)
        elif created:
            user.set_unusable_password()
        user.save()
        names = groups or [settings.IMPRI_DEFAULT_GROUP]
        for name in names:
            group, _ = Group.objects.get_or_create(name=name)
            user.groups.add(group)
        if created:
            self.stdout.write(f"Created reviewer {username} in {', '.join(names)}.")
        else:
            self.stdout.write(f"Set a new password for {username}, in {', '.join(names)}.")

    def _password(self, options, user) -> str | None:
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
            return _prompt(user, self.stderr)
        return os.environ.get(PASSWORD_ENV) or None


def _validate(password: str, user) -> None:
    try:
        password_validation.validate_password(password, user)
    except ValidationError as exc:
        raise CommandError("password refused: " + " ".join(exc.messages)) from None


def _prompt(user, stderr, attempts: int = PROMPT_ATTEMPTS) -> str | None:
    """Ask for the password twice; a weak or mistyped one is said and asked again, as passwd does."""
    for _ in range(attempts):
        first = getpass.getpass("Password: ")
        if not first:
            return None
        if first != getpass.getpass("Password (again): "):
            stderr.write("The passwords differ: try again.")
            continue
        try:
            password_validation.validate_password(first, user)
        except ValidationError as exc:
            stderr.write("Password refused: " + " ".join(exc.messages) + " Try again.")
            continue
        return first
    raise CommandError(f"no acceptable password after {attempts} attempts: nothing changed")


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except OSError as exc:
        raise CommandError(f"--password-file: {exc.strerror}: {path}") from None
