from __future__ import annotations

import os

from django.core.management import call_command
from django.core.management.base import BaseCommand

from approvals import services


class Command(BaseCommand):
    help = "Migrate the database, then serve HTTP, websockets and the API on daphne."

    def add_arguments(self, parser):
        parser.add_argument("--host", default=os.environ.get("IMPRI_HOST", "127.0.0.1"))
        parser.add_argument("--port", type=int, default=int(os.environ.get("IMPRI_PORT", "8000")))
        parser.add_argument(
            "--no-migrate", action="store_true", help="Skip migrations (another process ran them)."
        )
        parser.add_argument(
            "--proxy-headers",
            action="store_true",
            help="Trust X-Forwarded-For/-Proto from a proxy.",
        )

    def handle(self, *args, host: str, port: int, no_migrate: bool, proxy_headers: bool, **options):
        from daphne.cli import CommandLineInterface

        if not no_migrate:
            call_command("migrate", interactive=False, verbosity=0)
        services.default_group()
        self.stdout.write(
            f"Impri is listening on http://{host}:{port}/ (inbox at /inbox/, API at /api/v1/)"
        )
        self.stdout.flush()
        daphne_args = ["-b", host, "-p", str(port)]
        if proxy_headers:
            daphne_args.append("--proxy-headers")
        CommandLineInterface().run([*daphne_args, "impri.asgi:application"])
