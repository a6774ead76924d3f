"""Pushes to reviewers' phones: the push outbox, sent on a lane of its own.

Rows are written through ``approvals.outbox.enqueue_notifications`` (this app is a group
channel there, registered in ``apps.py``) in the transaction of the change they announce
(an action reaching a group, escalated to it, or a reminder): one per subscription of
each active member of the group. Its outbox (``OUTBOX``) sends what is due with every
outbox's lease, backoff and give-up (``delivery.outboxes``), each push service host a
destination of ``delivery.lanes``, through the outbound-address guard
(``plumbing.outbound``) like every webhook. A push service's 404 or 410 means the
browser dropped the subscription: every registration of it is removed, with its queued
pushes. Only an endpoint's owner (its earliest registration, ``models.PushSubscription``)
is pushed to; another reviewer's registration of it is held.

Each message is encrypted for the one browser (RFC 8291, aes128gcm through pywebpush)
and signed with the server's VAPID key (RFC 8292). Its JSON carries the action's id,
title, amount as the inbox shows it, what will happen and the inbox URL: of the agent's
words, only the title.
"""

from __future__ import annotations

import json
import logging
from urllib.parse import urlsplit

import httpx
from django.contrib.auth.models import Group
from django.db.models import Exists, OuterRef
from django.utils import timezone

from approvals import money as action_money
from approvals import outbox
from approvals.models import Action, ActionStatus
from approvals.presenters import inbox_url, outcome
from delivery import lanes, sending
from delivery.notices import one_line
from delivery.outboxes import Attempt, Failed, GiveUp, Outbox, Skip

from . import keys
from .models import PushDelivery, PushSubscription

logger = logging.getLogger(__name__)

TASK = "webpush.tasks.deliver_pushes"
# How long a push service keeps a message for a phone that is off (RFC 8030 TTL): a day,
# the longest an action usually waits; an expired or decided action's push is moot anyway.
TTL_S = 86400
GONE = (404, 410)

HEADLINES = {
    PushDelivery.Kind.NEW: "Review needed",
    PushDelivery.Kind.ESCALATED: "Escalated to you",
    PushDelivery.Kind.REMINDER: "Still waiting for you",
    PushDelivery.Kind.LEDGER: "Reconciliation exception",
}


# --- Writing rows, in the change's transaction ------------------------------------------


def reachable() -> Exists:
    """An active member of the group (``OuterRef("pk")``) has a push device.

    Read inside the one query ``approvals.outbox`` runs per push that reaches a queue,
    so a group without devices costs a push no statement of its own.
    """
    return Exists(
        PushSubscription.objects.filter(user__groups=OuterRef("pk"), user__is_active=True)
    )


def owners():
    """Registrations that own their endpoint: no earlier registration of it stands."""
    earlier = PushSubscription.objects.filter(endpoint=OuterRef("endpoint"), pk__lt=OuterRef("pk"))
    return PushSubscription.objects.exclude(Exists(earlier))


def enqueue(action: Action | None, group: Group, kind: str, detail: dict | None = None) -> int:
    """One row per push subscription the group's active members own; how many.

    A push with no action (a reconciliation exception about a movement nobody approved)
    says what ``detail`` holds: ``title``, ``amount``, ``url`` and ``topic``.
    """
    if kind not in PushDelivery.Kind.values:
        return 0
    subscriptions = list(
        owners()
        .filter(user__groups=group, user__is_active=True)
        .values_list("pk", flat=True)
        .distinct()
    )
    if not subscriptions:
        return 0
    PushDelivery.objects.bulk_create(
        PushDelivery(subscription_id=pk, action=action, group=group, kind=kind, detail=detail or {})
        for pk in subscriptions
    )
    outbox.kick_on_commit(TASK)
    return len(subscriptions)


# --- What a push says -------------------------------------------------------------------


def message(row: PushDelivery) -> dict:
    """The push's JSON: ``action_id``, ``title``, ``amount``, ``url`` (and a headline)."""
    action = row.action
    if action is None:
        return {
            "action_id": None,
            "title": one_line(row.detail.get("title", ""), 120),
            "amount": one_line(row.detail.get("amount", ""), 60),
            "url": row.detail.get("url", ""),
            "kind": row.kind,
            "headline": HEADLINES.get(row.kind, "Review needed"),
            "what": one_line(row.detail.get("amount", ""), 60),
            "topic": row.detail.get("topic", ""),
        }
    money = action_money.primary(action)
    amount = str(money) if money is not None else ""
    verb = one_line(outcome(action).verb, 60)
    return {
        "action_id": action.pk,
        "title": one_line(action.title, 120),
        "amount": amount,
        "url": inbox_url(action)
        + ("#reconciliation" if row.kind == PushDelivery.Kind.LEDGER else ""),
        "kind": row.kind,
        "headline": HEADLINES.get(row.kind, "Review needed"),
        "what": f"{verb} {amount}".strip() if amount else verb,
    }


def encrypted(subscription: PushSubscription, data: dict) -> tuple[bytes, dict[str, str]]:
    """The body (aes128gcm, RFC 8291) and headers (VAPID, TTL, urgency) for one push."""
    # pywebpush brings aiohttp and requests: loaded by the first push, not by every process
    # that loads the app (docs/benchmarks.md, "The scaled stack's idle footprint").
    # deferred: pywebpush: an idle worker never loads it (tests/project/test_footprint.py)
    from pywebpush import WebPusher

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
        "Topic": str(data["action_id"] or data.get("topic") or "impri")[
            :32
        ],  # a newer push about it replaces an undelivered one
    }
    return body, headers


# --- Sending ----------------------------------------------------------------------------


def read(due, n: int) -> list:
    """Each push service host is a destination; turns between reviewers within one."""
    rows = due.values_list("pk", "subscription__endpoint", "subscription__user_id")[:n]
    return [
        (pk, (f"push:{urlsplit(endpoint).hostname}", f"user:{user_id}"))
        for pk, endpoint, user_id in rows
    ]


def load(pk: int) -> PushDelivery:
    return PushDelivery.objects.select_related("subscription", "action__agent").get(pk=pk)


def send(row: PushDelivery, attempt: Attempt) -> None:
    subscription = row.subscription
    check_still_relevant(row)
    body, headers = encrypted(subscription, message(row))
    attempt.release()  # the database connection goes back during the network call
    with attempt.client.stream(
        "POST",
        subscription.endpoint,
        content=body,
        headers=headers,
        timeout=sending.request_timeout_s(),
    ) as response:
        if response.status_code in GONE:
            gone(subscription, response.status_code)  # its pushes go with it
            raise GiveUp(f"the push service answered {response.status_code}")
        if not response.is_success:
            raise Failed(f"HTTP {response.status_code}: {sending.start_of(response)}")


def sent(row: PushDelivery, lease_until, at) -> None:
    sending.record_success(PushDelivery, row.pk, at)
    PushSubscription.objects.filter(pk=row.subscription_id).update(last_push_at=timezone.now())


OUTBOX = Outbox(
    name="push",
    model=PushDelivery,
    lane=lanes.Lane("push", "Impri-Push/1"),
    read=read,
    load=load,
    send=send,
    sent=sent,
    no_answer=(httpx.TransportError,),
    pruned_as="push_deliveries",
)
LANE = OUTBOX.lane
send_due = OUTBOX.send_due
send_in_background = OUTBOX.send_in_background


def check_still_relevant(row: PushDelivery) -> None:
    action = row.action
    if row.kind == PushDelivery.Kind.LEDGER:
        return  # about money that moved: told whatever the action's state
    if action.effective_status != ActionStatus.PENDING:
        raise Skip(f"the action is {action.effective_status} now")
    if action.review_group_id != row.group_id:
        raise Skip("the action has moved to another group")


def gone(subscription: PushSubscription, status: int) -> None:
    """The push service no longer knows this browser: forget every registration of it (and
    their queued pushes), a held one's too."""
    deleted = PushSubscription.objects.filter(endpoint=subscription.endpoint).delete()[0]
    if deleted:
        logger.info(
            "push subscription %s of %s removed: the push service answered %s",
            subscription.pk,
            subscription.user_id,
            status,
        )
