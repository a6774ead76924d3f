"""Pruning delivery history after ``IMPRI_RETENTION_DAYS``: the outboxes and budget windows.

What goes, once older than the retention:

* webhook deliveries that were delivered or given up, with their attempts;
* notifications and pushes to reviewers' phones that were delivered or given up;
* budget counters of windows that started before the cutoff (a window is an
  hour or a day, so a counter that old is never reserved against again).

What never goes: the audit log (append-only, and its chain would break),
actions and reviews (the business record the audit events point at), and any
outbox row still being delivered, however old. Deletes run in batches so a
first prune of a large history never holds a long lock.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from approvals.models import Notification, WebhookAttempt, WebhookDelivery

logger = logging.getLogger(__name__)

BATCH = 1000


def prune(now: datetime | None = None, days: int | None = None, progress=None) -> dict[str, int]:
    """Delete what is older than the retention; returns how many rows of each kind went.

    ``progress(deleted, in_all)`` is told after each batch (``impri prune``'s bar).
    """
    days = settings.IMPRI_RETENTION_DAYS if days is None else days
    if not days:
        return {}
    cutoff = (now or timezone.now()) - timedelta(days=days)
    done = {
        "webhook_deliveries": 0,
        "webhook_attempts": 0,
        "notifications": 0,
        "budget_counters": 0,
    }
    finished_before = Q(delivered_at__lt=cutoff) | Q(gave_up_at__lt=cutoff)
    if progress is not None:
        in_all = (
            WebhookDelivery.objects.filter(finished_before).count()
            + Notification.objects.filter(finished_before).count()
        )
        progress(0, in_all)
    while ids := list(
        WebhookDelivery.objects.filter(finished_before).values_list("pk", flat=True)[:BATCH]
    ):
        with transaction.atomic():
            done["webhook_attempts"] += WebhookAttempt.objects.filter(delivery_id__in=ids).delete()[
                0
            ]
            done["webhook_deliveries"] += WebhookDelivery.objects.filter(pk__in=ids).delete()[0]
        if progress is not None:
            progress(done["webhook_deliveries"], in_all)
    while ids := list(
        Notification.objects.filter(finished_before).values_list("pk", flat=True)[:BATCH]
    ):
        done["notifications"] += Notification.objects.filter(pk__in=ids).delete()[0]
        if progress is not None:
            progress(done["webhook_deliveries"] + done["notifications"], in_all)
    if pushes := _prune_pushes(finished_before):  # webpush's outbox, when there was any
        done["push_deliveries"] = pushes
    done["budget_counters"] = _prune_budgets(cutoff)
    if any(done.values()):
        logger.info("pruned history older than %d days: %s", days, done)
    return done


def _prune_pushes(finished_before: Q) -> int:
    from webpush.models import PushDelivery

    pruned = 0
    while ids := list(
        PushDelivery.objects.filter(finished_before).values_list("pk", flat=True)[:BATCH]
    ):
        pruned += PushDelivery.objects.filter(pk__in=ids).delete()[0]
    return pruned


def _prune_budgets(cutoff: datetime) -> int:
    from rules.models import BudgetCounter

    pruned = 0
    while ids := list(
        BudgetCounter.objects.filter(window_start__lt=cutoff).values_list("pk", flat=True)[:BATCH]
    ):
        pruned += BudgetCounter.objects.filter(pk__in=ids).delete()[0]
    return pruned
