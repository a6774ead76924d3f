from __future__ import annotations

from django.conf import settings
from django.core.management.base import BaseCommand

from impri.management.commands.worker import start_background_process


class Command(BaseCommand):
    help = "Run Celery beat: triggers expiry, escalation, reminders and deliveries (scaled mode)."

    def add_arguments(self, parser):
        parser.add_argument("--loglevel", default=None, help="Default: IMPRI_LOG_LEVEL.")

    def handle(self, *args, loglevel, **options):
        from plumbing.celery import app

        start_background_process("beat", self.stderr, loglevel)
        settings.DATA_DIR.mkdir(parents=True, exist_ok=True)
        schedule = settings.DATA_DIR / "celerybeat-schedule"
        app.start(["beat", f"--schedule={schedule}"])
