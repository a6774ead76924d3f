"""The Celery task that sends due pushes (webpush.delivery), like the other delivery lanes."""

from __future__ import annotations

from celery import shared_task

from . import delivery


@shared_task
def deliver_pushes() -> int:
    return delivery.OUTBOX.send_in_background()
