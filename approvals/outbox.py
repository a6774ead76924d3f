"""The outboxes, written: webhooks to agents and notifications to reviewer groups.

Rows are written in the transaction of the change they announce, so they
exist exactly when the change does; the ``delivery`` app sends them (at least
once) from Celery or the embedded ticker. In scaled mode a worker is also
nudged right after commit (by task name: the core never imports the senders),
so a delivery doesn't wait for the next beat.
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

from plumbing import fallbacks

from . import rows
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
    kick_on_commit("delivery.tasks.deliver_webhooks")
    return delivery


def enqueue_notifications(action: Action, group: Group, kind: str) -> int:
    """One Notification per channel the group has switched on; returns how many."""
    has_members, saved, has_devices = _channel_config(group)
    channels = []
    email_on = saved.email_enabled if saved else True  # no settings row: email is on
    if email_on and (has_members or (saved and saved.extra_emails)):
        channels.append(Notification.Channel.EMAIL)
    if saved and saved.slack_webhook_url:
        channels.append(Notification.Channel.SLACK)
    for channel in channels:
        Notification.objects.create(action=action, group=group, kind=kind, channel=channel)
    if channels:
        kick_on_commit("delivery.tasks.send_notifications")
    if has_devices:
        from webpush import delivery as push  # reviewers' phones: a push outbox and lane of its own

        push.enqueue(action, group, kind)
    return len(channels)


def _channel_config(group: Group) -> tuple[bool, GroupNotificationSettings | None, bool]:
    """Whether an active member of the group has an address, the group's settings row, and
    whether an active member has a push device (``webpush``).

    One plain SQL statement: it runs on every push that reaches a queue, and
    compiling the ORM's version cost more than running it (docs/benchmarks.md).
    """
    connection = transaction.get_connection()
    quote = connection.ops.quote_name
    through = User.groups.through._meta
    table = GroupNotificationSettings._meta
    saved_cols = rows.columns(GroupNotificationSettings, "s", connection.alias)
    from webpush.delivery import devices_exist_sql

    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT EXISTS (SELECT 1 FROM {quote(User._meta.db_table)} u"
            f" JOIN {quote(through.db_table)} m"
            f" ON m.{quote(through.get_field('user').column)} = u.{quote(User._meta.pk.column)}"
            f" WHERE m.{quote(through.get_field('group').column)} = %s"
            f" AND u.{quote('is_active')} = %s AND u.{quote('email')} <> ''),"
            f" {devices_exist_sql(quote)},"
            f" {saved_cols.sql} FROM {quote(Group._meta.db_table)} g"
            f" LEFT JOIN {quote(table.db_table)} s"
            f" ON s.{quote(table.get_field('group').column)} = g.{quote(Group._meta.pk.column)}"
            f" WHERE g.{quote(Group._meta.pk.column)} = %s",
            [group.pk, True, group.pk, True, group.pk],
        )
        row = cursor.fetchone()
    if row is None:  # the group is gone
        return False, None, False
    exists = row[2] is not None  # the settings row's primary key
    return bool(row[0]), saved_cols.instance(row[2:]) if exists else None, bool(row[1])


def kick_on_commit(task_name: str) -> None:
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
    from plumbing.celery import app

    with _queued_lock:
        _queued.discard(task_name)
    try:
        app.send_task(task_name, retry=False)
    except Exception as exc:  # the beat will pick the row up anyway
        fallbacks.note("broker", f"could not nudge {task_name}; the next beat delivers", exc)
