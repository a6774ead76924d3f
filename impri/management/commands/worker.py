from __future__ import annotations

import logging
import os
import sys
import warnings

from celery.concurrency import get_implementation
from celery.exceptions import SecurityError, SecurityWarning
from celery.platforms import maybe_drop_privileges
from celery.utils.nodenames import default_nodename
from django.conf import settings
from django.core import checks
from django.core.management.base import BaseCommand, CommandError

from impri import storage
from plumbing.celery import app

NEEDS_REDIS = (
    "impri {command} needs REDIS_URL (the Celery broker, e.g. redis://127.0.0.1:6379/0). "
    "Without it Impri runs in embedded mode, where `impri serve` does this work itself."
)

PAGES_CHECKS = (checks.Tags.urls, checks.Tags.templates, checks.Tags.admin)


def start_background_process(command: str, stderr, loglevel: str | None) -> None:
    """What `impri worker` and `impri beat` do before handing over to Celery."""
    if not settings.REDIS_URL:
        raise CommandError(NEEDS_REDIS.format(command=command))
    if loglevel:
        logging.getLogger().setLevel(loglevel.upper())
    stderr.write(f"Impri {command}: {storage.describe()}")
    if command == "worker" and hasattr(os, "geteuid") and os.geteuid() == 0:
        # Celery's own warning is fifteen lines on every start; this says what to do instead.

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
    # Every check but those of the pages: the URL configuration's, the templates' and the
    # admin's would load every view, the REST API, the MCP server and every template tag
    # library into a process that serves none (`impri serve` checks them).
    requires_system_checks = [
        tag
        for name, tag in vars(checks.Tags).items()
        if not name.startswith("_") and tag not in PAGES_CHECKS
    ]

    def add_arguments(self, parser):
        parser.add_argument("--concurrency", type=int, default=None)
        parser.add_argument("--loglevel", default=None, help="Default: IMPRI_LOG_LEVEL.")

    def handle(self, *args, concurrency, loglevel, **options):

        start_background_process("worker", self.stderr, loglevel)
        # deferred: beat loads no model (tests/project/test_beat.py), and it imports this module
        from approvals import grants

        # This process signs the grants its webhooks carry (approvals/grants.py); beat signs none.
        grants.publish_at_start()
        # Threads, not prefork: deliveries already run on Impri's own lanes (delivery.lanes),
        # and Celery's Django fixup closes the psycopg pool after every prefork task, under
        # the lanes' feet ("pool has already been opened/closed").
        # The checks ran above; Celery's Django fix-up would run them all again (URLs too).
        os.environ["CELERY_SKIP_CHECKS"] = "1"
        run_worker(app, concurrency)


def run_worker(app, concurrency: int | None) -> None:
    """What `celery worker --pool=threads [--concurrency=N]` runs, without Celery's command line.

    Its command line loads every subcommand (a REPL with prompt_toolkit among them) to run
    this one; these are the arguments it passes to ``app.Worker`` by default
    (``tests/project/test_footprint.py`` compares them with the command line's).
    """

    try:
        maybe_drop_privileges()
        worker = app.Worker(**worker_arguments(app, concurrency))
    except SecurityError as exc:
        raise CommandError(str(exc)) from exc
    worker.start()
    # As `celery worker` ends: a worker stopped by an unrecoverable error exits non-zero,
    # so that systemd or Docker restart it.
    sys.exit(worker.exitcode or 0)


def worker_arguments(app, concurrency: int | None) -> dict:

    return {
        "hostname": default_nodename(None),
        "pool": get_implementation("threads"),
        "pool_cls": None,
        "concurrency": concurrency or None,
        "loglevel": logging.WARNING,
        "prefetch_multiplier": app.conf.worker_prefetch_multiplier,
        "optimization": "default",
        "schedule_filename": app.conf.beat_schedule_filename,
        "no_color": False,
        "quiet": False,
        "detach": False,
        "purge": False,
        "without_gossip": False,
        "without_mingle": False,
        "without_heartbeat": False,
        **dict.fromkeys(
            (
                "autoscale",
                "beat",
                "exclude_queues",
                "executable",
                "heartbeat_interval",
                "include",
                "logfile",
                "max_memory_per_child",
                "max_tasks_per_child",
                "pidfile",
                "pool_start_method",
                "queues",
                "scheduler",
                "soft_time_limit",
                "statedb",
                "task_events",
                "time_limit",
                "umask",
            )
        ),
    }
