"""``impri mcp``: the agent tools over stdio, for agents that start Impri as a subprocess.

stdout carries nothing but the MCP protocol: Django's logging already writes
to stderr, the SDK points fd 1 at stderr while it serves, and every message
of this command goes to stderr too.

It signs grants with the deployment's key, the one ``impri serve`` publishes
(``IMPRI_GRANT_SIGNING_KEY_FILE``, or the key serve generated in this data
directory), and never makes or publishes one of its own: without it, it refuses
to start with one line naming the setting (``approvals.grants.use_shared_key``).
"""

from __future__ import annotations

import os

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError

from agent_doors.mcp import build_server
from approvals import grants
from approvals.errors import RateLimited
from gateway.proxy import build_gateway_server
from gateway.services import exists
from identity import keys
from impri import storage


class Command(BaseCommand):
    help = (
        "Serve the agent tools over MCP stdio. The agent is the one whose key is in IMPRI_API_KEY."
    )
    requires_system_checks = []  # their warnings would be noise in an agent's log

    def add_arguments(self, parser):
        parser.add_argument(
            "--gateway",
            metavar="NAME",
            help="Serve the tools of the upstream MCP server configured as gateway NAME "
            "(docs/gateway.md) instead of Impri's agent tools.",
        )

    def handle(self, *args, gateway=None, **options):
        raw = os.environ.get("IMPRI_API_KEY", "").strip()
        if not raw:
            raise CommandError(
                "IMPRI_API_KEY is not set: create an agent key with `impri createagent NAME` "
                "and put it in the MCP server's environment"
            )
        principal = _authenticate(raw)
        if principal is None:
            raise CommandError(
                "IMPRI_API_KEY is not a valid agent key (unknown, revoked, or its agent is "
                "disabled): issue one with `impri createagent NAME --new-key`"
            )
        if principal.agent is None:
            raise CommandError(
                "IMPRI_API_KEY is a reviewer token; `impri mcp` needs an agent key "
                "from `impri createagent NAME`"
            )

        try:
            # Signs with the key impri serve published; never generates or publishes its own.
            grants.use_shared_key()
        except grants.KeyRefused as exc:
            raise CommandError(str(exc)) from None
        if settings.DATABASE_URL and not settings.REDIS_URL:
            self.stderr.write(
                "warning: DATABASE_URL is set but REDIS_URL is not: a decision made in `impri "
                "serve` reaches this agent only by the re-read every "
                f"{settings.IMPRI_AWAIT_REREAD_S:g} s; give this process the REDIS_URL serve uses"
            )
        if gateway:
            if not exists(gateway):
                raise CommandError(
                    f"no enabled gateway named {gateway!r}: see `impri gateway export`"
                )
            self.stderr.write(
                f"Impri MCP gateway {gateway} (stdio) serving agent {principal.agent.name}; "
                f"{storage.describe()}"
            )
            build_gateway_server(gateway, api_key=raw).run("stdio")
            return
        self.stderr.write(
            f"Impri MCP (stdio) serving agent {principal.agent.name}; {storage.describe()}"
        )
        build_server(api_key=raw).run("stdio")


def _authenticate(raw: str):
    try:
        return keys.authenticate(raw)
    except RateLimited as exc:
        raise CommandError(exc.message) from None
    except DatabaseError as exc:
        raise CommandError(
            f"the database is not ready ({exc}); run `impri serve` once, or `impri migrate`, "
            "with the same IMPRI_DATA_DIR / DATABASE_URL"
        ) from None
