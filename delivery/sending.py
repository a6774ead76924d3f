"""Sending an outbox row: the mechanics every sender shares.

One sender at a time per row (a lease taken with one conditional UPDATE),
retries with exponential backoff and jitter for up to a day, then
``gave_up_at``; a success stays a success whoever holds the lease by then.
The rows are written by the core (``approvals.outbox``) in the transaction of
the change they announce; the one loop that sends every outbox with these
(webhooks, notices, the Slack app's messages, pushes to phones) is
``delivery.outboxes``.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from datetime import datetime, timedelta
from urllib.parse import urlsplit

import httpx
from django.conf import settings
from django.db.models import F
from django.utils import timezone

from . import lanes

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
