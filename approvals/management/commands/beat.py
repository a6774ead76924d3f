from __future__ import annotations

from django.conf import settings
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Run Celery beat: triggers expiry, escalation, reminders and deliveries (scaled mode)."

    def add_arguments(self, parser):
        parser.add_argument("--loglevel", default="INFO")

    def handle(self, *args, loglevel, **options):
        from impri.celery import app

        settings.DATA_DIR.mkdir(parents=True, exist_ok=True)
        schedule = settings.DATA_DIR / "celerybeat-schedule"
        app.start(["beat", f"--loglevel={loglevel}", f"--schedule={schedule}"])
