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
import threading
from concurrent.futures import ThreadPoolExecutor

from django.conf import settings
from django.contrib.auth.models import Group, User
from django.core.serializers.json import DjangoJSONEncoder
from django.db import transaction
from django.db.models import Exists, OuterRef

from . import faults
from .models import Action, Notification, WebhookDelivery
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
    # One query on the hot path (every push): the group's settings and whether
    # any active member has an address.
    members = User.objects.filter(groups=OuterRef("pk"), is_active=True).exclude(email="")
    config = (
        Group.objects.filter(pk=group.pk)
        .annotate(has_members=Exists(members))
        .values(
            "has_members",
            "notification_settings__email_enabled",
            "notification_settings__extra_emails",
            "notification_settings__slack_webhook_url",
        )
        .first()
    ) or {}
    channels = []
    email_on = config.get("notification_settings__email_enabled")
    email_on = True if email_on is None else email_on  # no settings row: email is on
    has_addresses = bool(
        config.get("has_members") or config.get("notification_settings__extra_emails")
    )
    if email_on and has_addresses:
        channels.append(Notification.Channel.EMAIL)
    if config.get("notification_settings__slack_webhook_url"):
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
    transaction.on_commit(lambda: _nudge_soon(task_name))


# The nudge is published from a thread of its own, never from the request: a
# broker that is slow or away (Redis down, kombu reconnecting) costs the
# request nothing, and a burst of commits coalesces into one nudge per task.
_nudger = ThreadPoolExecutor(max_workers=1, thread_name_prefix="impri-nudge")
_queued: set[str] = set()
_queued_lock = threading.Lock()


def _nudge_soon(task_name: str) -> None:
    with _queued_lock:
        if task_name in _queued:
            return
        _queued.add(task_name)
    _nudger.submit(_send, task_name)


def _send(task_name: str) -> None:
    from impri.celery import app

    with _queued_lock:
        _queued.discard(task_name)
    try:
        app.send_task(task_name, retry=False)
    except Exception as exc:  # the beat will pick the row up anyway
        faults.note("broker", f"could not nudge {task_name}; the next beat delivers", exc)
