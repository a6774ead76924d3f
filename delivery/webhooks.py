"""Deliver signed webhooks to agents: the sending side of the ``WebhookDelivery`` outbox.

The services write a ``WebhookDelivery`` row in the transaction of the change it
announces; :func:`deliver_due` (a Celery task in scaled mode, the in-process
ticker in embedded mode) sends what is due. Guarantees:

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

The lease, retry and give-up mechanics are the outbox's (``approvals.outbox``),
shared with the notifications (``delivery.notices``).

Nothing here decides anything about an action: it only reads the outbox row and
the agent's secret and writes delivery bookkeeping.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import time
from collections.abc import Callable
from datetime import datetime
from urllib.parse import urlsplit

import httpx
from django.db import connection, transaction
from django.utils import timezone

from approvals.models import WebhookAttempt, WebhookDelivery
from delivery import lanes
from plumbing import outbound

from .sending import (
    BUSY,
    FAILED,
    SENT,
    UNREACHABLE,
    USER_AGENT,
    clock,
    describe,
    is_http_url,
    record_failure,
    record_success,
    request_timeout_s,
    start_of,
    take_lease,
)

logger = logging.getLogger(__name__)

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

LANE = lanes.Lane("webhooks", USER_AGENT)


def destination(url: str) -> str:
    """Where a URL goes (scheme, host, port): the unit a receiver's fair share is counted in."""
    try:
        parts = urlsplit(url)
        return f"{parts.scheme}://{parts.hostname}:{parts.port or ''}".lower()
    except ValueError:
        return url


def deliver_due(now: datetime | None = None, limit: int = 50, background: bool = False) -> int:
    """Send the webhooks that are due (at most ``limit``), a fair share per receiver and agent.

    Inline (the default) it sends on this thread and returns the attempts
    made; in the background (ticker, Celery) it hands rows to the webhook
    lane's threads and returns how many (see ``delivery.lanes``).
    Idempotent: with nothing due it reads one query and writes nothing.
    """
    read_clock = clock(now)

    def read(claimed: list, n: int) -> list:
        rows = (
            WebhookDelivery.objects.due(read_clock())
            .exclude(pk__in=claimed)
            .exclude(action__agent_id__in=LANE.saturated("agent:"))
            .order_by("next_attempt_at", "pk")
            .values_list("pk", "url", "action__agent_id")[:n]
        )
        return [(pk, (destination(url), f"agent:{agent}")) for pk, url, agent in rows]

    def send(pk: str, in_background: bool) -> str:
        release = connection.close if in_background else None
        return deliver_one(LANE.client(), pk, read_clock, release)

    return LANE.sweep(read, send, limit=limit, background=background)


def deliver_one(
    client: httpx.Client,
    pk: str,
    read_clock: Callable[[], datetime],
    release: Callable[[], None] | None = None,
) -> str:
    """Lease one row and make one attempt; BUSY if another worker had it or it is done.

    ``release`` (background sends) gives the database connection back while
    the request is in flight, so a slow receiver holds no pooled connection.
    """
    lease_until = take_lease(WebhookDelivery, pk, read_clock())
    if lease_until is None:
        return BUSY
    delivery = WebhookDelivery.objects.select_related("action__agent").get(pk=pk)
    attempt = WebhookAttempt.objects.create(delivery=delivery, at=read_clock(), error=NO_OUTCOME)
    if release is not None:
        release()
    began = time.monotonic()
    sendable = is_http_url(delivery.url)
    if sendable:
        status_code, error, unreachable, refused = post(client, delivery)
    else:
        status_code, error, unreachable, refused = None, "not an http(s) URL; not sent", False, True
    duration_ms = int((time.monotonic() - began) * 1000)
    finished = read_clock()
    ok = status_code is not None and 200 <= status_code < 300
    with transaction.atomic():
        WebhookAttempt.objects.filter(pk=attempt.pk).update(
            status_code=status_code, error="" if ok else error, duration_ms=duration_ms
        )
        if ok:
            record_success(WebhookDelivery, pk, finished)
        elif refused:
            WebhookDelivery.objects.filter(pk=pk, locked_until=lease_until).update(
                last_error=error, locked_until=None, gave_up_at=finished
            )
        elif record_failure(
            WebhookDelivery,
            pk,
            lease_until,
            delivery.created_at,
            delivery.attempts,
            error,
            finished,
        ):
            logger.error(
                "gave up webhook %s (%s) to %s after %d attempts: %s",
                pk,
                delivery.event,
                delivery.url,
                delivery.attempts,
                error,
            )
    if ok:
        return SENT
    logger.warning("webhook %s to %s failed: %s", pk, delivery.url, error)
    return UNREACHABLE if unreachable else FAILED


def post(client: httpx.Client, delivery: WebhookDelivery) -> tuple[int | None, str, bool, bool]:
    """POST one message: (status code or None, error text, no answer, refused). Never raises.

    Refused: the destination is one Impri does not send to (``plumbing.outbound``),
    or the message can't be signed; such a row is given up at once, not retried.
    """
    body = encode_body(delivery.body)
    timestamp = int(timezone.now().timestamp())
    try:
        signature = sign(delivery.action.agent.webhook_secret, delivery.id, timestamp, body)
    except ValueError:
        return (
            None,
            "the agent's webhook secret is not a valid whsec_ secret; not sent",
            False,
            True,
        )
    headers = {
        "content-type": "application/json",
        "webhook-id": delivery.id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": signature,
    }
    try:
        with client.stream(
            "POST", delivery.url, content=body, headers=headers, timeout=request_timeout_s()
        ) as response:
            if 200 <= response.status_code < 300:
                return response.status_code, "", False, False
            error = f"HTTP {response.status_code}: {start_of(response)}"
            return response.status_code, error, False, False
    except outbound.Refused as exc:
        return None, f"refused: {exc}; not sent", False, True
    except httpx.TransportError as exc:
        return None, describe(exc), True, False
    except Exception as exc:  # any failure to send is a failed attempt, recorded and retried
        logger.exception("unexpected error sending webhook %s", delivery.id)
        return None, describe(exc), False, False


def deliver_in_background() -> int:
    """A background sweep: what the ticker, the Celery task and the lane itself run."""
    return deliver_due(background=True)


LANE.sweeper = deliver_in_background
