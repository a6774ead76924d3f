"""Deliver signed webhooks to agents: the sending side of the ``WebhookDelivery`` outbox.

The services write a ``WebhookDelivery`` row in the transaction of the change it
announces; its outbox (``OUTBOX``, sent by ``delivery.outboxes`` from a Celery task
in scaled mode, the in-process ticker in embedded mode) sends what is due. Guarantees:

* **Signed per Standard Webhooks**: ``webhook-id`` (the row id, the same on
  every retry), ``webhook-timestamp`` (seconds, at this attempt) and
  ``webhook-signature: v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">``
  keyed with the agent's ``whsec_`` secret.
* **One sender at a time**: a worker takes a row with one conditional UPDATE
  that sets ``locked_until`` only if the row is still due and unleased (or its
  lease ran out), so two workers never send the same row at once.
* **At least once**: a worker that dies mid-send leaves its lease to run out;
  the next sweep sends the same message again. Receivers deduplicate on
  ``webhook-id``.
* **Every attempt recorded** (``WebhookAttempt``), written *before* the request
  so even an attempt whose worker died shows up in admin.
* **Retries** with exponential backoff and jitter, for up to a day after the
  row was created; then ``gave_up_at``.

The lease, retry and give-up mechanics are every outbox's (``delivery.outboxes``,
``delivery.sending``), shared with the notices, the Slack app's messages and pushes.

Nothing here decides anything about an action: it only reads the outbox row and
the agent's secret and writes delivery bookkeeping.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from urllib.parse import urlsplit

import httpx
from django.utils import timezone

from approvals.models import WebhookAttempt, WebhookDelivery
from delivery import lanes
from plumbing import outbound

from .outboxes import Attempt, Failed, GiveUp, Outbox
from .sending import USER_AGENT, is_http_url, request_timeout_s, start_of

SECRET_PREFIX = "whsec_"

# Written before an attempt starts and replaced when it ends: an attempt that
# still says this had its worker stop mid-send (the lease then runs out and the
# message is sent again).
NO_OUTCOME = "no outcome recorded: the worker stopped during this attempt"


# --- Signing ------------------------------------------------------------------


def secret_bytes(secret: str) -> bytes:
    """The raw HMAC key of a ``whsec_…`` secret (the prefix is optional)."""
    encoded = secret.removeprefix(SECRET_PREFIX)
    return base64.b64decode(encoded, validate=True)


def sign(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` header value for one message (Standard Webhooks, v1)."""
    signed = f"{msg_id}.{int(timestamp)}.".encode() + body
    digest = hmac.new(secret_bytes(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def encode_body(body) -> bytes:
    """The exact bytes sent (and signed): stable across retries of one message."""
    return json.dumps(body, separators=(",", ":"), sort_keys=True, ensure_ascii=False).encode()


# --- Delivery -----------------------------------------------------------------


def destination(url: str) -> str:
    """Where a URL goes (scheme, host, port): the unit a receiver's fair share is counted in."""
    try:
        parts = urlsplit(url)
        return f"{parts.scheme}://{parts.hostname}:{parts.port or ''}".lower()
    except ValueError:
        return url


def read(due, n: int) -> list:
    """A fair share per receiver and, within one, turns between agents (``delivery.lanes``)."""
    rows = due.exclude(action__agent_id__in=OUTBOX.lane.saturated("agent:")).values_list(
        "pk", "url", "action__agent_id"
    )[:n]
    return [(pk, (destination(url), f"agent:{agent}")) for pk, url, agent in rows]


def load(pk: str) -> WebhookDelivery:
    return WebhookDelivery.objects.select_related("action__agent").get(pk=pk)


def send(delivery: WebhookDelivery, attempt: Attempt) -> None:
    """Record the attempt, then POST the signed message (the connection given back meanwhile).

    A destination Impri does not send to (``plumbing.outbound``), a URL that is
    not http(s) or a message that can't be signed is given up at once, not retried.
    """
    attempt.notes["row"] = WebhookAttempt.objects.create(
        delivery=delivery, at=attempt.clock(), error=NO_OUTCOME
    )
    attempt.release()
    attempt.began = time.monotonic()
    if not is_http_url(delivery.url):
        raise GiveUp("not an http(s) URL; not sent")
    body = encode_body(delivery.body)
    timestamp = int(timezone.now().timestamp())
    try:
        signature = sign(delivery.action.agent.webhook_secret, delivery.id, timestamp, body)
    except ValueError:
        raise GiveUp("the agent's webhook secret is not a valid whsec_ secret; not sent") from None
    headers = {
        "content-type": "application/json",
        "webhook-id": delivery.id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": signature,
    }
    try:
        with attempt.client.stream(
            "POST", delivery.url, content=body, headers=headers, timeout=request_timeout_s()
        ) as response:
            attempt.notes["status_code"] = response.status_code
            if not 200 <= response.status_code < 300:
                raise Failed(f"HTTP {response.status_code}: {start_of(response)}")
    except outbound.Refused as exc:
        raise GiveUp(f"refused: {exc}; not sent") from None


def finish(delivery: WebhookDelivery, attempt: Attempt, error: str) -> None:
    """The attempt's outcome, in the transaction that records the row's."""
    if "row" in attempt.notes:
        WebhookAttempt.objects.filter(pk=attempt.notes["row"].pk).update(
            status_code=attempt.notes.get("status_code"),
            error=error,
            duration_ms=attempt.duration_ms(),
        )


OUTBOX = Outbox(
    name="webhooks",
    model=WebhookDelivery,
    lane=lanes.Lane("webhooks", USER_AGENT),
    read=read,
    load=load,
    send=send,
    finish=finish,
    no_answer=(httpx.TransportError,),
    pruned_as="webhook_deliveries",
    listed_when_none=True,
    pruned_with=(("webhook_attempts", WebhookAttempt, "delivery_id"),),
)
LANE = OUTBOX.lane
# What the tests, the ticker's task and the CLI call: the outbox's sweeps.
deliver_due = OUTBOX.send_due
deliver_in_background = OUTBOX.send_in_background
