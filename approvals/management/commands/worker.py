from __future__ import annotations

from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Run a Celery worker (scaled mode: needs REDIS_URL)."

    def add_arguments(self, parser):
        parser.add_argument("--concurrency", type=int, default=None)
        parser.add_argument("--loglevel", default="INFO")

    def handle(self, *args, concurrency, loglevel, **options):
        from impri.celery import app

        argv = ["worker", f"--loglevel={loglevel}"]
        if concurrency:
            argv.append(f"--concurrency={concurrency}")
        app.worker_main(argv)
