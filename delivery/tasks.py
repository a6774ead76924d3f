"""Celery tasks of delivery: each hands due rows to a lane or prunes; running one twice changes nothing."""

from __future__ import annotations

from celery import shared_task

from . import notices, retention, webhooks

# The two delivery tasks hand due rows to their lane's threads in this worker
# process and return at once (delivery.lanes): a receiver that never answers
# holds a lane thread, never a Celery worker slot, so expiry and the other
# lane keep running. The outbox's lease keeps one sender per row.


@shared_task
def deliver_webhooks() -> int:
    return webhooks.OUTBOX.send_in_background()


@shared_task
def send_notifications() -> int:
    return notices.OUTBOX.send_in_background()


@shared_task
def prune_history() -> dict:
    return retention.prune()
