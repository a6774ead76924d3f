"""``ledger.exception`` notices: one per exception and destination, through the channels
reviewers already set up (a group's Slack incoming webhook, e-mail, phones) and the
Standard Webhooks the agents and the operator receive, sent by delivery's loop.

Who is told: the groups holding the ``ledger.reconcile`` permission (their Slack hook, and
their members' phones through webpush; a push with no action links the Reconciliation
page) and the active users who hold it (their e-mail address); as a signed webhook
(``webhook_payload``), the action's ``callback_url`` (delivery's ``WebhookDelivery`` outbox, signed with its agent's
secret) and the operator's endpoint ``IMPRI_LEDGER_WEBHOOK_URL`` (a ``Notice`` row, signed
with ``IMPRI_LEDGER_WEBHOOK_SECRET``). Rows are written in the transaction that found the
exception; ``Notice.key`` makes a second write of one exception a no-op.
"""

from __future__ import annotations

import httpx
from django.conf import settings
from django.contrib.auth.models import Group, Permission, User
from django.core.mail import get_connection, send_mail
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.urls import reverse
from django.utils import timezone

from approvals.models import GroupNotificationSettings, WebhookDelivery, new_message_id
from approvals.money import Money, approved
from approvals.outbox import kick_on_commit
from delivery import lanes, sending, webhooks
from delivery.outboxes import Failed, GiveUp, Outbox, Skip
from plumbing import outbound, public_url
from webpush import delivery as push
from webpush.models import PushDelivery

from . import selectors
from .models import Notice

WHAT = {
    "mismatch": "another amount or currency than approved moved",
    "unapproved": "money moved without an approval",
    "duplicate": "more than the approval moved, in several movements (refunded twice?)",
    "unsettled": "reported executed, but the processor shows no movement",
    "unreported": "money moved for an approved action whose agent never reported",
}


def _holders():
    perm = Permission.objects.filter(codename="reconcile", content_type__app_label="ledger")
    groups = Group.objects.filter(permissions__in=perm)
    users = User.objects.filter(is_active=True).exclude(email="")
    users = users.filter(Q(groups__in=groups) | Q(user_permissions__in=perm)).distinct()
    return groups, users


def _money(minor: int, currency: str) -> str:
    return str(Money(minor, currency))


def text(subject: str, state: str, action, movements) -> str:
    moved = ", ".join(
        f"{m.kind} {m.external_id} {_money(m.amount_minor, m.currency)}" for m in movements
    )
    here = link(state)
    if action is not None:
        allowed = approved(action) or {}
        approved_text = ", ".join(_money(v, c) for c, v in allowed.items()) or "no declared amount"
        head = f"Reconciliation: {state} on {action.title!r} ({action.pk})"
        return (
            f"{head}: {WHAT[state]}. Approved {approved_text}; moved: {moved or 'nothing'}. {here}"
        )
    return f"Reconciliation: {state}: {WHAT[state]}. Moved: {moved}. {here}"


def link(state: str) -> str:
    return public_url.base_url(None) + reverse("ledger:exceptions") + f"?state={state}"


def webhook_payload(subject: str, state: str, action, movements) -> dict:
    """The ``ledger.exception`` webhook's JSON (the same to a callback_url and the operator's)."""
    moved: dict[str, int] = {}
    for m in movements:
        if m.counts:
            moved[m.currency] = moved.get(m.currency, 0) + m.amount_minor
    latest = max(movements, key=lambda m: (m.recorded_at, m.pk), default=None)
    return {
        "type": "ledger.exception",
        "timestamp": int(timezone.now().timestamp()),
        "data": {
            "exception": subject,
            "state": state,
            "action_id": action.pk if action is not None else None,
            "movement_id": latest.external_id if latest is not None else None,
            "approved": (approved(action) or {}) if action is not None else None,
            "moved": moved,
            "movements": [selectors.movement_out(m) for m in movements],
            "url": link(state),
        },
    }


def _once(key: str, **fields) -> bool:
    """Write one Notice under ``key``; False if this exception already has it."""
    try:
        with transaction.atomic():
            Notice.objects.create(key=key[:400], **fields)
    except IntegrityError:
        return False
    return True


def _webhooks(subject: str, state: str, action, movements) -> int:
    """The signed ``ledger.exception`` webhooks: the action's callback_url, the operator's URL."""
    payload = webhook_payload(subject, state, action, movements)
    made = 0
    if action is not None and action.callback_url:
        # A marker (delivered at once) keeps it once; delivery's webhook outbox sends it.
        marker = {"state": state, "subject": subject, "text": ""}
        if _once(
            f"{subject}:{state}:callback",
            channel=Notice.Channel.CALLBACK,
            destination=action.callback_url,
            body=marker,
            delivered_at=timezone.now(),
        ):
            WebhookDelivery.objects.create(
                action=action, event="ledger.exception", url=action.callback_url, body=payload
            )
            kick_on_commit("delivery.tasks.deliver_webhooks")
            made += 1
    url = settings.IMPRI_LEDGER_WEBHOOK_URL
    if url and _once(
        f"{subject}:{state}:webhook",
        channel=Notice.Channel.WEBHOOK,
        destination=url,
        body={"state": state, "subject": subject, "webhook_id": new_message_id(), **payload},
    ):
        kick_on_commit("ledger.tasks.send_notices")
        made += 1
    return made


def enqueue(subject: str, state: str, action, movements) -> int:
    """Write the exception's notices (in the caller's transaction); returns how many are new."""
    groups, users = _holders()
    body = {"text": text(subject, state, action, movements), "state": state, "subject": subject}
    made = _webhooks(subject, state, action, movements)
    rows = []
    hooks = GroupNotificationSettings.objects.filter(group__in=groups).exclude(slack_webhook_url="")
    for prefs in hooks:
        rows.append((Notice.Channel.SLACK, prefs.slack_webhook_url))
    for user in users:
        rows.append((Notice.Channel.EMAIL, user.email))
    detail = None
    if action is None:  # money moved without an action: the push says what moved
        detail = {
            "title": WHAT[state],
            "amount": ", ".join(_money(m.amount_minor, m.currency) for m in movements),
            "url": link(state),
            "topic": subject.replace(":", "-"),
        }
    for group in groups:  # reviewers' phones (webpush), once per exception and group
        marker = {"channel": Notice.Channel.PUSH, "destination": f"group:{group.pk}", "body": body}
        if _once(f"{subject}:{state}:push:{group.pk}", delivered_at=timezone.now(), **marker):
            push.enqueue(action, group, PushDelivery.Kind.LEDGER, detail)
    new = 0
    for channel, destination in rows:
        key = f"{subject}:{state}:{channel}:{destination}"
        new += _once(key, channel=channel, destination=destination, body=body)
    if new:
        kick_on_commit("ledger.tasks.send_notices")
    return made + new


def read(due, n: int) -> list:
    rows = due.values_list("pk", "channel", "destination")[:n]
    return [
        (pk, ("email" if channel == Notice.Channel.EMAIL else destination,))
        for pk, channel, destination in rows
    ]


def load(pk: int) -> Notice:
    return Notice.objects.get(pk=pk)


def send_webhook(notice: Notice, attempt) -> None:
    """POST the signed ``ledger.exception`` (Standard Webhooks: one webhook-id on every retry)."""
    if not sending.is_http_url(notice.destination):
        raise GiveUp("IMPRI_LEDGER_WEBHOOK_URL is not an http(s) URL; not sent")
    payload = {k: v for k, v in notice.body.items() if k in ("type", "timestamp", "data")}
    body = webhooks.encode_body(payload)
    msg_id = notice.body["webhook_id"]
    timestamp = int(timezone.now().timestamp())
    try:
        signature = webhooks.sign(settings.IMPRI_LEDGER_WEBHOOK_SECRET, msg_id, timestamp, body)
    except ValueError:
        raise GiveUp("IMPRI_LEDGER_WEBHOOK_SECRET is not a valid whsec_ secret; not sent") from None
    headers = {
        "content-type": "application/json",
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": signature,
    }
    try:
        with attempt.client.stream(
            "POST",
            notice.destination,
            content=body,
            headers=headers,
            timeout=sending.request_timeout_s(),
        ) as response:
            if not 200 <= response.status_code < 300:
                raise Failed(f"HTTP {response.status_code}: {sending.start_of(response)}")
    except outbound.Refused as exc:
        raise GiveUp(f"refused: {exc}; not sent") from None


def send(notice: Notice, attempt) -> None:
    attempt.release()
    if notice.channel == Notice.Channel.WEBHOOK:
        send_webhook(notice, attempt)
        return
    if notice.channel == Notice.Channel.EMAIL:
        timeout = settings.EMAIL_TIMEOUT or sending.request_timeout_s()
        subject = notice.body["text"].split(":", 2)
        send_mail(
            f"[Impri] Reconciliation {notice.body['state']}: {subject[-1][:120].strip()}",
            notice.body["text"],
            None,
            [notice.destination],
            fail_silently=False,
            connection=get_connection(timeout=timeout),
        )
        return
    if not sending.is_http_url(notice.destination):
        raise Skip("the Slack webhook URL is not an http(s) URL")
    try:
        with attempt.client.stream(
            "POST",
            notice.destination,
            json={"text": notice.body["text"]},
            timeout=sending.request_timeout_s(),
        ) as response:
            if not 200 <= response.status_code < 300:
                raise Failed(f"HTTP {response.status_code}: {sending.start_of(response)}")
    except outbound.Refused as exc:
        raise Skip(f"refused: {exc}; not sent") from None


OUTBOX = Outbox(
    name="ledger_notices",
    model=Notice,
    lane=lanes.Lane("ledger_notices", sending.USER_AGENT),
    read=read,
    load=load,
    send=send,
    no_answer=(OSError, httpx.TransportError),
    pruned_as="ledger_notices",
)
send_due = OUTBOX.send_due
