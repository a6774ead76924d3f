"""``celery -A impri``: the Celery app is ``plumbing.celery.app`` (apps send tasks through it)."""

from plumbing.celery import app

__all__ = ["app"]
