"""``impri beat``: Celery beat, sending the periodic jobs of impri/schedule.py by name.

Beat only puts timed messages on the broker: it runs no task, reads no table and signs
nothing. So the console script starts it without ``django.setup()`` (impri/cli.py): the
settings are read, logging is configured as Django would, and this command runs on a
Celery app of its own (:func:`beat_app`) that knows no task module, no Django app and no
model. The messages are the ones the full app would send: ``send_task`` by the job's
name, with the same ``CELERY_*`` settings.
"""

from __future__ import annotations

import logging

from celery import Celery
from celery.platforms import maybe_drop_privileges
from django.conf import settings
from django.core.management.base import BaseCommand

from impri.management.commands.worker import start_background_process


def beat_app():
    """A Celery app that only sends: the ``CELERY_*`` settings, no fix-up, no task modules.

    Celery's Django fix-up is left out (it would call ``django.setup()`` when beat
    starts), and nothing is autodiscovered: beat finds no registered task under a
    job's name and sends it by name (``celery.beat.Scheduler.apply_async``), as it
    would for any task it cannot import.
    """

    app = Celery("impri", fixups=[], set_as_current=False)
    app.config_from_object("django.conf:settings", namespace="CELERY")
    return app


class Command(BaseCommand):
    help = "Run Celery beat: triggers expiry, escalation, reminders and deliveries (scaled mode)."
    # Nothing of Django's apps is loaded (see the module's docstring): nothing to check.
    requires_system_checks = []

    def add_arguments(self, parser):
        parser.add_argument("--loglevel", default=None, help="Default: IMPRI_LOG_LEVEL.")

    def handle(self, *args, loglevel, **options):
        start_background_process("beat", self.stderr, loglevel)
        settings.DATA_DIR.mkdir(parents=True, exist_ok=True)
        run_beat(beat_app(), settings.DATA_DIR / "celerybeat-schedule")


def run_beat(app, schedule) -> None:
    """What `celery beat --schedule=...` runs, without Celery's command line.

    Its command line loads every subcommand (a REPL with prompt_toolkit among them) to run
    this one (``tests/project/test_beat.py`` compares the two beats).
    """
    maybe_drop_privileges()
    app.Beat(schedule=str(schedule), loglevel=logging.WARNING, quiet=False).run()
