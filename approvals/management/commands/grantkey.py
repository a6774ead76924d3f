from __future__ import annotations

import getpass
import json

from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from approvals import grants
from audit import log as audit
from audit.models import ActorType


class Command(BaseCommand):
    help = (
        "Show or rotate the key that signs approval grants. `show` prints the published "
        "JWKS; `rotate` replaces a generated key (the retired public key stays published)."
    )

    def add_arguments(self, parser):
        parser.add_argument("verb", choices=["show", "rotate"])

    def handle(self, *args, verb: str, **options):
        if verb == "show":
            self.stdout.write(json.dumps(grants.jwks(), indent=2))
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
