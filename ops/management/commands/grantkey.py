from __future__ import annotations

import getpass
import json

from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from approvals import grant_pem, grants
from approvals.models import GrantSigningKey
from audit import log as audit
from audit.models import ActorType


class Command(BaseCommand):
    help = (
        "The key that signs approval grants. `new` prints a new key (PEM) to share across "
        "replicas (IMPRI_GRANT_SIGNING_KEY_FILE; needs no database); `show` prints the "
        "published JWKS; `list` the published keys; `rotate` replaces a generated key (the "
        "old public key stays published); `retire -- KID` stops publishing one for good "
        "(refused while a process used it within IMPRI_KEY_LIVE_S, unless --force)."
    )
    requires_system_checks = []  # `new` runs before any database exists (README, Compose)

    def create_parser(self, prog_name, subcommand, **kwargs):
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        # `retire --force -- KID` as the docs write it (argparse alone takes [kid] with the verb).
        parser.parse_args = parser.parse_intermixed_args
        return parser

    def add_arguments(self, parser):
        parser.add_argument("verb", choices=["new", "show", "list", "rotate", "retire"])
        parser.add_argument(
            "kid", nargs="?", help="retire: the key id (impri grantkey list); put -- before it"
        )
        parser.add_argument(
            "--force",
            action="store_true",
            help="retire: even a key a process published or signed with within IMPRI_KEY_LIVE_S",
        )

    def handle(self, *args, verb: str, kid: str | None = None, force=False, **options):
        if verb == "new":
            self.stdout.write(grant_pem.new_pem(), ending="")
            return
        if verb == "show":
            self.stdout.write(json.dumps(grants.jwks(), indent=2))
            return
        if verb == "list":
            self._list()
            return
        if verb == "retire":
            self._retire(kid, force)
            return
        try:
            with transaction.atomic():
                old, new = grants.rotate()
                audit.record(
                    "grant.key_rotated",
                    actor_type=ActorType.SYSTEM,
                    actor_id=f"cli:{getpass.getuser()}",
                    data={"retired_kid": old, "kid": new},
                )
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        self.stderr.write(
            f"Grant signing key rotated: {old} retired (still published), {new} signs from now. "
            "Restart the running servers so they sign with the new key."
        )
        self.stdout.write(new)

    def _list(self) -> None:

        own = grants.signing_key().kid
        for row in GrantSigningKey.objects.all():
            state = (
                "retired" if row.retired_at else "rotated out" if row.superseded_at else "signing"
            )
            mine = " (this process)" if row.kid == own else ""
            signed = (
                f", signed {row.last_signed_at:%Y-%m-%d %H:%M} UTC" if row.last_signed_at else ""
            )
            self.stdout.write(
                f"{row.kid}  {state}{mine}  published {row.published_at:%Y-%m-%d %H:%M} UTC, "
                f"last {row.last_published_at:%Y-%m-%d %H:%M} UTC{signed}  {row.source}"
            )

    def _retire(self, kid: str | None, force: bool) -> None:
        if not kid:
            raise CommandError(
                "name the key to retire: impri grantkey retire -- KID (see impri grantkey list; the -- lets a KID start with -)"
            )
        try:
            with transaction.atomic():
                grants.retire(kid, force=force)
                audit.record(
                    "grant.key_retired",
                    actor_type=ActorType.SYSTEM,
                    actor_id=f"cli:{getpass.getuser()}",
                    data={"kid": kid, "forced": True} if force else {"kid": kid},
                )
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        self.stderr.write(
            f"{kid} is no longer published, and never will be again: grants it signed no "
            "longer verify."
        )
