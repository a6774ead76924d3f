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

Nothing here decides anything about an action: it only reads the outbox row and
the agent's secret and writes delivery bookkeeping.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import random
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from urllib.parse import urlsplit

import httpx
from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from .models import WebhookAttempt, WebhookDelivery

logger = logging.getLogger(__name__)

SECRET_PREFIX = "whsec_"
USER_AGENT = "Impri-Webhooks/1"

# Retry schedule: 10 s, 20 s, 40 s, … doubling up to 2 h between attempts, each
# delay scaled by a random factor in [0.5, 1] so a recovering receiver is not hit
# by every queued message at once. After a day the row is given up (a last
# attempt is made at the one-day mark).
BACKOFF_BASE_S = 10
BACKOFF_CAP_S = 2 * 3600
GIVE_UP_AFTER = timedelta(days=1)
# How much of a failed response's body to keep in the attempt log.
ERROR_BODY_CHARS = 500

# Written before an attempt starts and replaced when it ends: an attempt that
# still says this had its worker stop mid-send (the lease then runs out and the
# message is sent again).
NO_OUTCOME = "no outcome recorded: the worker stopped during this attempt"


def request_timeout_s() -> float:
    return float(getattr(settings, "IMPRI_WEBHOOK_TIMEOUT_S", 10))


def lease_s() -> float:
    """How long a worker owns a row it is sending; well above the request timeout."""
    return float(getattr(settings, "IMPRI_WEBHOOK_LEASE_S", 60))


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


# --- Outbox mechanics shared with approvals.notify --------------------------------


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


# --- Delivery -----------------------------------------------------------------

# deliver_one's outcomes.
BUSY = "busy"  # another worker holds the row, or it is no longer due
SENT = "sent"  # the receiver answered 2xx
FAILED = "failed"  # it answered otherwise, or the message could not be sent at all
UNREACHABLE = "unreachable"  # no answer: connection refused, timed out, …


class Sweep:
    """One pass over due rows, kept short so the sweeps after it run on time.

    It stops taking new rows once ``budget_s`` is spent (at least one attempt is
    made), and skips the rest of a destination that just gave no answer: one
    dead receiver costs one timeout per sweep, not one per queued message. The
    rows it leaves are still due and go first next time.
    """

    def __init__(self, budget_s: float | None = None):
        budget = sweep_budget_s() if budget_s is None else budget_s
        self.deadline = time.monotonic() + budget
        self.unreachable: set[str] = set()
        self.attempted = 0

    def wants(self, destination: str) -> bool:
        if self.attempted and time.monotonic() >= self.deadline:
            return False
        return destination not in self.unreachable

    def done(self, destination: str, outcome: str) -> None:
        if outcome == BUSY:
            return
        self.attempted += 1
        if outcome == UNREACHABLE:
            self.unreachable.add(destination)


def sweep_budget_s() -> float:
    return float(getattr(settings, "IMPRI_DELIVERY_SWEEP_BUDGET_S", 30))


def destination(url: str) -> str:
    """Where a URL goes (scheme, host, port): the unit a dead receiver is skipped by."""
    try:
        parts = urlsplit(url)
        return f"{parts.scheme}://{parts.hostname}:{parts.port or ''}".lower()
    except ValueError:
        return url


def deliver_due(now: datetime | None = None, limit: int = 50, budget_s: float | None = None) -> int:
    """Send the webhooks that are due (at most ``limit``); the number of attempts made.

    Idempotent: with nothing due it reads one query and writes nothing.
    """
    read_clock = clock(now)
    rows = list(
        WebhookDelivery.objects.due(read_clock())
        .order_by("next_attempt_at", "pk")
        .values_list("pk", "url")[:limit]
    )
    if not rows:
        return 0
    sweep = Sweep(budget_s)
    with httpx.Client(
        timeout=httpx.Timeout(request_timeout_s()),
        follow_redirects=False,
        headers={"user-agent": USER_AGENT},
    ) as client:
        for pk, url in rows:
            if sweep.wants(destination(url)):
                sweep.done(destination(url), deliver_one(client, pk, read_clock))
    return sweep.attempted


def deliver_one(client: httpx.Client, pk: str, read_clock: Callable[[], datetime]) -> str:
    """Lease one row and make one attempt; BUSY if another worker had it or it is done."""
    lease_until = take_lease(WebhookDelivery, pk, read_clock())
    if lease_until is None:
        return BUSY
    delivery = WebhookDelivery.objects.select_related("action__agent").get(pk=pk)
    attempt = WebhookAttempt.objects.create(delivery=delivery, at=read_clock(), error=NO_OUTCOME)
    began = time.monotonic()
    sendable = is_http_url(delivery.url)
    if sendable:
        status_code, error, unreachable = post(client, delivery)
    else:
        status_code, error, unreachable = None, "not an http(s) URL; not sent", False
    duration_ms = int((time.monotonic() - began) * 1000)
    finished = read_clock()
    ok = status_code is not None and 200 <= status_code < 300
    with transaction.atomic():
        WebhookAttempt.objects.filter(pk=attempt.pk).update(
            status_code=status_code, error="" if ok else error, duration_ms=duration_ms
        )
        if ok:
            record_success(WebhookDelivery, pk, finished)
        elif not sendable:
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


def post(client: httpx.Client, delivery: WebhookDelivery) -> tuple[int | None, str, bool]:
    """POST one message: (status code or None, error text, no answer at all). Never raises."""
    body = encode_body(delivery.body)
    timestamp = int(timezone.now().timestamp())
    try:
        signature = sign(delivery.action.agent.webhook_secret, delivery.id, timestamp, body)
    except ValueError:
        return None, "the agent's webhook secret is not a valid whsec_ secret; not sent", False
    headers = {
        "content-type": "application/json",
        "webhook-id": delivery.id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": signature,
    }
    try:
        with client.stream("POST", delivery.url, content=body, headers=headers) as response:
            if 200 <= response.status_code < 300:
                return response.status_code, "", False
            error = f"HTTP {response.status_code}: {_start_of(response)}"
            return response.status_code, error, False
    except httpx.TransportError as exc:
        return None, describe(exc), True
    except Exception as exc:  # any failure to send is a failed attempt, recorded and retried
        logger.exception("unexpected error sending webhook %s", delivery.id)
        return None, describe(exc), False


def describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _start_of(response: httpx.Response) -> str:
    """The first few hundred characters of a body, without reading a huge one."""
    chunks, size = [], 0
    try:
        for chunk in response.iter_bytes():
            chunks.append(chunk)
            size += len(chunk)
            if size >= ERROR_BODY_CHARS:
                break
    except httpx.HTTPError:
        pass
    return b"".join(chunks)[:ERROR_BODY_CHARS].decode("utf-8", "replace").strip()
