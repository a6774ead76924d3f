"""Writing outbox rows: webhooks to agents and notifications to reviewer groups.

Rows are written in the transaction of the change they announce, so they
exist exactly when the change does; ``approvals.webhooks`` and
``approvals.notify`` deliver them (at least once) from Celery or the embedded
ticker. In scaled mode a worker is also nudged right after commit, so a
delivery doesn't wait for the next beat.
"""

from __future__ import annotations

import json
import logging

from django.conf import settings
from django.contrib.auth.models import Group
from django.core.serializers.json import DjangoJSONEncoder
from django.db import transaction

from .models import Action, GroupNotificationSettings, Notification, WebhookDelivery
from .presenters import decision_out

logger = logging.getLogger(__name__)


def enqueue_webhook(action: Action, event: str) -> WebhookDelivery | None:
    """Announce a settled action to the agent's callback_url, with the body await_decision returns."""
    if not action.callback_url:
        return None
    body = json.loads(json.dumps(decision_out(action), cls=DjangoJSONEncoder))
    delivery = WebhookDelivery.objects.create(
        action=action, event=event, url=action.callback_url, body=body
    )
    _kick_on_commit("approvals.tasks.deliver_webhooks")
    return delivery


def enqueue_notifications(action: Action, group: Group, kind: str) -> int:
    """One Notification per channel the group has switched on; returns how many."""
    config = GroupNotificationSettings.objects.filter(group=group).first()
    channels = []
    email_on = config.email_enabled if config else True
    has_addresses = group.user_set.filter(is_active=True).exclude(email="").exists() or bool(
        config and config.extra_emails
    )
    if email_on and has_addresses:
        channels.append(Notification.Channel.EMAIL)
    if config and config.slack_webhook_url:
        channels.append(Notification.Channel.SLACK)
    for channel in channels:
        Notification.objects.create(action=action, group=group, kind=kind, channel=channel)
    if channels:
        _kick_on_commit("approvals.tasks.send_notifications")
    return len(channels)


def _kick_on_commit(task_name: str) -> None:
    # Embedded mode runs tasks eagerly, which here would mean HTTP calls inside
    # a reviewer's request: leave those to the in-process ticker instead.
    if settings.CELERY_TASK_ALWAYS_EAGER:
        return
    transaction.on_commit(lambda: _send(task_name))


def _send(task_name: str) -> None:
    from impri.celery import app

    try:
        app.send_task(task_name)
    except Exception:  # the beat will pick the row up anyway
        logger.warning("could not nudge %s; the next beat will deliver", task_name, exc_info=True)
