"""The Celery task that posts and updates the Slack app's messages (slackapp.delivery)."""

from __future__ import annotations

from celery import shared_task

from . import delivery


@shared_task
def deliver_slack_messages() -> int:
    return delivery.OUTBOX.send_in_background()
