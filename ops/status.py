"""What an operator checks first, read from the database: the queue, the outboxes, the chain.

Shared by ``/metrics`` (ops.metrics) and the admin's index page (ops.admin_site),
so both say the same thing.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db.models import Count, Min, Q

from approvals.models import Action, ActionStatus, Notification, WebhookDelivery
from audit import verification
from audit.models import ChainHead
from webpush.models import PushDelivery


@dataclass(frozen=True)
class Queue:
    pending: int
    overdue: int  # pending past expires_at, not yet swept
    oldest_pending_s: float
    stale: int


@dataclass(frozen=True)
class Lane:
    name: str
    due: int
    oldest_due_s: float
    failing: int
    gave_up: int


def queue(now: datetime) -> Queue:

    pending = Q(status=ActionStatus.PENDING, expires_at__gt=now)
    row = Action.objects.order_by().aggregate(
        pending=Count("pk", filter=pending),
        overdue=Count("pk", filter=Q(status=ActionStatus.PENDING, expires_at__lte=now)),
        oldest=Min("created_at", filter=pending),
        stale=Count("pk", filter=Q(status=ActionStatus.APPROVED, stale_flagged_at__isnull=False)),
    )
    oldest = (now - row["oldest"]).total_seconds() if row["oldest"] else 0.0
    return Queue(row["pending"], row["overdue"], oldest, row["stale"])


def outbox(now: datetime) -> list[Lane]:
    """Per lane (webhooks, notifications): due now, how long the oldest has waited, failing, given up."""

    lanes = []
    for name, model in (
        ("webhooks", WebhookDelivery),
        ("notifications", Notification),
        ("push", PushDelivery),
    ):
        open_rows = Q(delivered_at__isnull=True, gave_up_at__isnull=True)
        is_due = open_rows & Q(next_attempt_at__lte=now)
        row = model.objects.order_by().aggregate(
            due=Count("pk", filter=is_due),
            oldest=Min("next_attempt_at", filter=is_due),
            failing=Count("pk", filter=open_rows & Q(attempts__gt=0) & ~Q(last_error="")),
            gave_up=Count("pk", filter=Q(gave_up_at__isnull=False)),
        )
        oldest = (now - row["oldest"]).total_seconds() if row["oldest"] else 0.0
        lanes.append(Lane(name, row["due"], oldest, row["failing"], row["gave_up"]))
    return lanes


def chain():
    """(events in the chain, the latest verification or None)."""

    head = ChainHead.objects.filter(pk=1).values_list("seq", flat=True).first() or 0
    return head, verification.latest()
