"""The outboxes: webhooks to agents and notifications to reviewer groups.

Writing: rows are written in the transaction of the change they announce, so
they exist exactly when the change does; ``approvals.webhooks`` and
``approvals.notify`` deliver them (at least once) from Celery or the embedded
ticker. In scaled mode a worker is also nudged right after commit, so a
delivery doesn't wait for the next beat.

Sending (shared by both senders): one sender at a time per row (a lease taken
with one conditional UPDATE), retries with exponential backoff and jitter for
up to a day, then ``gave_up_at``; a success stays a success whoever holds the
lease by then.
"""

from __future__ import annotations

import json
import logging
import random
import re
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from urllib.parse import urlsplit

import httpx
from django.conf import settings
from django.contrib.auth.models import Group, User
from django.core.serializers.json import DjangoJSONEncoder
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from . import faults, lanes, rows
from .models import Action, GroupNotificationSettings, Notification, WebhookDelivery
from .presenters import decision_out

logger = logging.getLogger(__name__)

USER_AGENT = "Impri-Webhooks/1"

# Retry schedule: 10 s, 20 s, 40 s, … doubling up to 2 h between attempts, each
# delay scaled by a random factor in [0.5, 1] so a recovering receiver is not hit
# by every queued message at once. After a day the row is given up (a last
# attempt is made at the one-day mark).
BACKOFF_BASE_S = 10
BACKOFF_CAP_S = 2 * 3600
GIVE_UP_AFTER = timedelta(days=1)
# How much of a failed response's body to keep in the attempt log (as one line of text).
ERROR_BODY_CHARS = 200

# The outcomes of one attempt to send one row.
BUSY = lanes.BUSY  # another worker holds the row, or it is no longer due
SENT = "sent"  # the receiver answered 2xx
FAILED = "failed"  # it answered otherwise, or the message could not be sent at all
UNREACHABLE = lanes.UNREACHABLE  # no answer: connection refused, timed out, …


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
        _kick_on_commit("approvals.tasks.send_notifications")
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


# --- Sending: the mechanics both senders share ---------------------------------------


def request_timeout_s() -> float:
    """How long one outbound request (a webhook, a Slack post, an SMTP exchange) may take."""
    return settings.IMPRI_WEBHOOK_TIMEOUT_S


def lease_s() -> float:
    """How long a worker owns a row it is sending; well above the request timeout."""
    return settings.IMPRI_WEBHOOK_LEASE_S


def backoff(attempts: int) -> timedelta:
    """The delay after the ``attempts``-th failed attempt (1-based), with jitter."""
    exponent = max(attempts - 1, 0)
    delay = BACKOFF_BASE_S * 2 ** min(exponent, 20)
    return timedelta(seconds=min(delay, BACKOFF_CAP_S) * random.uniform(0.5, 1.0))


def take_lease(model, pk, now: datetime) -> datetime | None:
    """Claim one due outbox row with a single conditional UPDATE; the lease's end, or None.

    The WHERE clause repeats "due and not leased by a live worker", so of two
    workers racing for a row exactly one UPDATE matches it. The same statement
    counts the attempt, so an attempt whose worker dies still counts.
    """
    until = now + timedelta(seconds=lease_s())
    taken = (
        model.objects.due(now).filter(pk=pk).update(locked_until=until, attempts=F("attempts") + 1)
    )
    return until if taken else None


def record_failure(
    model, pk, lease_until: datetime, created_at: datetime, attempts: int, error: str, at: datetime
) -> bool:
    """Schedule the next attempt, or give up a day after ``created_at``. True if given up.

    Only the holder of the current lease writes: if this worker's lease ran out
    and another worker took the row, that worker's outcome is the one that counts.
    """
    deadline = created_at + GIVE_UP_AFTER
    give_up = at >= deadline
    changes = {"last_error": error[:2000], "locked_until": None}
    if give_up:
        changes["gave_up_at"] = at
    else:
        changes["next_attempt_at"] = min(at + backoff(attempts), deadline)
    model.objects.filter(pk=pk, locked_until=lease_until, delivered_at__isnull=True).update(
        **changes
    )
    return give_up


def record_success(model, pk, at: datetime) -> None:
    """A delivery that arrived stays delivered, whoever holds the lease now."""
    model.objects.filter(pk=pk, delivered_at__isnull=True).update(
        delivered_at=at, locked_until=None, last_error="", gave_up_at=None
    )


def clock(now: datetime | None) -> Callable[[], datetime]:
    """A fixed time when the caller gives one (tests, replays); else the wall clock per row."""
    return (lambda: now) if now is not None else timezone.now


def is_http_url(url: str) -> bool:
    try:
        parts = urlsplit(url)
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname)


def describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def start_of(response: httpx.Response) -> str:
    """The start of an answer's body as one short line of text, without reading a huge one.

    Kept short on purpose: an answer is a receiver's, and only its gist helps
    whoever debugs a failing delivery. Admin shows it as escaped text.
    """
    chunks, size = [], 0
    try:
        for chunk in response.iter_bytes():
            chunks.append(chunk)
            size += len(chunk)
            if size >= ERROR_BODY_CHARS:
                break
    except httpx.HTTPError:
        pass
    text = b"".join(chunks)[:ERROR_BODY_CHARS].decode("utf-8", "replace")
    return " ".join(re.sub(r"[\x00-\x1f\x7f]+", " ", text).split())
