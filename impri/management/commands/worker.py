from __future__ import annotations

import logging
import os
import sys
import warnings

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from impri import storage

NEEDS_REDIS = (
    "impri {command} needs REDIS_URL (the Celery broker, e.g. redis://127.0.0.1:6379/0). "
    "Without it Impri runs in embedded mode, where `impri serve` does this work itself."
)


def start_background_process(command: str, stderr, loglevel: str | None) -> None:
    """What `impri worker` and `impri beat` do before handing over to Celery."""
    if not settings.REDIS_URL:
        raise CommandError(NEEDS_REDIS.format(command=command))
    if loglevel:
        logging.getLogger().setLevel(loglevel.upper())
    stderr.write(f"Impri {command}: {storage.describe()}")
    if command == "worker" and hasattr(os, "geteuid") and os.geteuid() == 0:
        # Celery's own warning is fifteen lines on every start; this says what to do instead.
        from celery.exceptions import SecurityWarning

        warnings.filterwarnings("ignore", category=SecurityWarning)
        stderr.write(
            "warning: impri worker runs as root; run it as an unprivileged user instead "
            "(the image runs as user impri), which also silences Celery's warning about it"
        )
    # Celery prints its banner to stdout; everything of a background process goes to stderr.
    sys.stdout.flush()
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())


class Command(BaseCommand):
    help = "Run a Celery worker: webhooks, notifications, sweeps (scaled mode: needs REDIS_URL)."

    def add_arguments(self, parser):
        parser.add_argument("--concurrency", type=int, default=None)
        parser.add_argument("--loglevel", default=None, help="Default: IMPRI_LOG_LEVEL.")

    def handle(self, *args, concurrency, loglevel, **options):
        from plumbing.celery import app

        start_background_process("worker", self.stderr, loglevel)
        from approvals import grants

        # This process signs the grants its webhooks carry (approvals/grants.py); beat signs none.
        grants.publish_at_start()
        # Threads, not prefork: deliveries already run on Impri's own lanes (delivery.lanes),
        # and Celery's Django fixup closes the psycopg pool after every prefork task, under
        # the lanes' feet ("pool has already been opened/closed").
        argv = ["worker", "--pool=threads"]
        if concurrency:
            argv.append(f"--concurrency={concurrency}")
        app.worker_main(argv)
