"""Pushes to reviewers' phones: the push outbox, sent on a lane of its own.

Rows are written through ``approvals.outbox.enqueue_notifications`` (this app is a group
channel there, registered in ``apps.py``) in the transaction of the change they announce
(an action reaching a group, escalated to it, or a reminder): one per subscription of
each active member of the group. :func:`send_due` sends what is
due with the outbox's lease, backoff and give-up (``approvals.outbox``), each push
service host a destination of ``delivery.lanes``, through the outbound-address guard
(``plumbing.outbound``) like every webhook. A push service's 404 or 410 means the
browser dropped the subscription: it is removed, with its queued pushes.

Each message is encrypted for the one browser (RFC 8291, aes128gcm through pywebpush)
and signed with the server's VAPID key (RFC 8292). Its JSON carries the action's id,
title, amount as the inbox shows it, what will happen and the inbox URL: of the agent's
words, only the title.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from datetime import datetime
from urllib.parse import urlsplit

import httpx
from django.contrib.auth.models import Group
from django.db import connection
from django.db.models import Exists, OuterRef
from django.utils import timezone
from pywebpush import WebPusher

from approvals import money as action_money
from approvals import outbox
from approvals.models import Action, ActionStatus
from approvals.presenters import inbox_url, outcome
from delivery import lanes, sending
from delivery.notices import one_line

from . import keys
from .models import PushDelivery, PushSubscription

logger = logging.getLogger(__name__)

LANE = lanes.Lane("push", "Impri-Push/1")
TASK = "webpush.tasks.deliver_pushes"
# How long a push service keeps a message for a phone that is off (RFC 8030 TTL): a day,
# the longest an action usually waits; an expired or decided action's push is moot anyway.
TTL_S = 86400
GONE = (404, 410)

HEADLINES = {
    PushDelivery.Kind.NEW: "Review needed",
    PushDelivery.Kind.ESCALATED: "Escalated to you",
    PushDelivery.Kind.REMINDER: "Still waiting for you",
}


class Skip(Exception):
    """Nothing to send for this row (the action moved on); closed as given up."""


class PushRefused(Exception):
    """The push service answered with an error that retrying may fix."""


# --- Writing rows, in the change's transaction ------------------------------------------


def reachable() -> Exists:
    """An active member of the group (``OuterRef("pk")``) has a push device.

    Read inside the one query ``approvals.outbox`` runs per push that reaches a queue,
    so a group without devices costs a push no statement of its own.
    """
    return Exists(
        PushSubscription.objects.filter(user__groups=OuterRef("pk"), user__is_active=True)
    )


def enqueue(action: Action, group: Group, kind: str) -> int:
    """One row per push subscription of the group's active members; how many."""
    if kind not in PushDelivery.Kind.values:
        return 0
    subscriptions = list(
        PushSubscription.objects.filter(user__groups=group, user__is_active=True)
        .values_list("pk", flat=True)
        .distinct()
    )
    if not subscriptions:
        return 0
    PushDelivery.objects.bulk_create(
        PushDelivery(subscription_id=pk, action=action, group=group, kind=kind)
        for pk in subscriptions
    )
    outbox.kick_on_commit(TASK)
    return len(subscriptions)


# --- What a push says -------------------------------------------------------------------


def message(row: PushDelivery) -> dict:
    """The push's JSON: ``action_id``, ``title``, ``amount``, ``url`` (and a headline)."""
    action = row.action
    money = action_money.primary(action)
    amount = str(money) if money is not None else ""
    verb = one_line(outcome(action).verb, 60)
    return {
        "action_id": action.pk,
        "title": one_line(action.title, 120),
        "amount": amount,
        "url": inbox_url(action),
        "kind": row.kind,
        "headline": HEADLINES.get(row.kind, "Review needed"),
        "what": f"{verb} {amount}".strip() if amount else verb,
    }


def encrypted(subscription: PushSubscription, data: dict) -> tuple[bytes, dict[str, str]]:
    """The body (aes128gcm, RFC 8291) and headers (VAPID, TTL, urgency) for one push."""
    pusher = WebPusher(
        {
            "endpoint": subscription.endpoint,
            "keys": {"p256dh": subscription.p256dh, "auth": subscription.auth},
        }
    )
    body = pusher.encode(json.dumps(data).encode(), "aes128gcm")["body"]
    headers = {
        "Authorization": keys.authorization(subscription.endpoint),
        "Content-Encoding": "aes128gcm",
        "Content-Type": "application/octet-stream",
        "TTL": str(TTL_S),
        "Urgency": "high",
        "Topic": str(data["action_id"])[:32],  # a newer push about it replaces an undelivered one
    }
    return body, headers


# --- Sending ----------------------------------------------------------------------------


def send_due(now: datetime | None = None, limit: int = 50, background: bool = False) -> int:
    read_clock = sending.clock(now)

    def read(claimed: list, n: int) -> list:
        rows = (
            PushDelivery.objects.due(read_clock())
            .exclude(pk__in=claimed)
            .order_by("next_attempt_at", "pk")
            .values_list("pk", "subscription__endpoint", "subscription__user_id")[:n]
        )
        # Each push service host is a destination; turns between reviewers within one.
        return [
            (pk, (f"push:{urlsplit(endpoint).hostname}", f"user:{user_id}"))
            for pk, endpoint, user_id in rows
        ]

    def send(pk: int, in_background: bool) -> str:
        return send_one(LANE.client(), pk, read_clock, connection.close if in_background else None)

    return LANE.sweep(read, send, limit=limit, background=background)


def send_in_background() -> int:
    return send_due(background=True)


LANE.sweeper = send_in_background


def send_one(
    client: httpx.Client,
    pk: int,
    read_clock: Callable[[], datetime],
    release: Callable[[], None] | None = None,
) -> str:
    """Lease one row and make one attempt; an outcome from ``approvals.outbox``."""
    lease_until = sending.take_lease(PushDelivery, pk, read_clock())
    if lease_until is None:
        return sending.BUSY
    row = PushDelivery.objects.select_related("subscription", "action__agent").get(pk=pk)
    subscription = row.subscription
    try:
        check_still_relevant(row)
        body, headers = encrypted(subscription, message(row))
        if release is not None:
            release()  # the database connection goes back during the network call
        with client.stream(
            "POST",
            subscription.endpoint,
            content=body,
            headers=headers,
            timeout=sending.request_timeout_s(),
        ) as response:
            if response.status_code in GONE:
                gone(subscription, response.status_code)
                return sending.FAILED
            if not response.is_success:
                raise PushRefused(f"HTTP {response.status_code}: {sending.start_of(response)}")
    except Skip as skip:
        PushDelivery.objects.filter(pk=pk, locked_until=lease_until).update(
            last_error=f"skipped: {skip}", locked_until=None, gave_up_at=read_clock()
        )
        return sending.FAILED
    except Exception as exc:  # a failed push is retried with backoff, whatever broke
        error = str(exc) if isinstance(exc, PushRefused) else sending.describe(exc)
        gave_up = sending.record_failure(
            PushDelivery, pk, lease_until, row.created_at, row.attempts, error, read_clock()
        )
        (logger.error if gave_up else logger.warning)("push %s failed: %s", pk, error)
        return sending.UNREACHABLE if isinstance(exc, httpx.TransportError) else sending.FAILED
    sending.record_success(PushDelivery, pk, read_clock())
    PushSubscription.objects.filter(pk=subscription.pk).update(last_push_at=timezone.now())
    return sending.SENT


def check_still_relevant(row: PushDelivery) -> None:
    action = row.action
    if action.effective_status != ActionStatus.PENDING:
        raise Skip(f"the action is {action.effective_status} now")
    if action.review_group_id != row.group_id:
        raise Skip("the action has moved to another group")


def gone(subscription: PushSubscription, status: int) -> None:
    """The push service no longer knows this browser: forget it (and its queued pushes)."""
    deleted = PushSubscription.objects.filter(pk=subscription.pk).delete()[0]
    if deleted:
        logger.info(
            "push subscription %s of %s removed: the push service answered %s",
            subscription.pk,
            subscription.user_id,
            status,
        )
