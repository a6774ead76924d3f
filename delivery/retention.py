"""Pruning delivery history after ``IMPRI_RETENTION_DAYS``: the outboxes and budget windows.

What goes, once older than the retention:

* the rows of every registered outbox (``delivery.outboxes``) that were delivered
  or given up: webhook deliveries with their attempts, notifications, pushes to
  reviewers' phones (not the Slack app's messages: a row is its message's handle);
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

from rules.models import BudgetCounter

from . import outboxes

logger = logging.getLogger(__name__)

BATCH = 1000


def prune(now: datetime | None = None, days: int | None = None, progress=None) -> dict[str, int]:
    """Delete what is older than the retention; returns how many rows of each kind went.

    Every registered outbox (``delivery.outboxes``) that is pruned at all, in the
    order of registration; an app's outbox is listed only when rows of it went.
    ``progress(deleted, in_all)`` is told after each batch (``impri prune``'s bar).
    """
    days = settings.IMPRI_RETENTION_DAYS if days is None else days
    if not days:
        return {}
    cutoff = (now or timezone.now()) - timedelta(days=days)
    finished_before = Q(delivered_at__lt=cutoff) | Q(gave_up_at__lt=cutoff)
    pruned = [box for box in outboxes.REGISTERED.values() if box.pruned_as]
    if progress is not None:
        in_all = sum(box.model.objects.filter(finished_before).count() for box in pruned)
        progress(0, in_all)
    done: dict[str, int] = {}
    gone = 0
    for box in pruned:
        counts = _prune_outbox(box, finished_before)
        gone += counts[box.pruned_as]
        if progress is not None:
            progress(gone, in_all)
        if box.listed_when_none or counts[box.pruned_as]:
            done.update(counts)
    done["budget_counters"] = _prune_budgets(cutoff)
    if any(done.values()):
        logger.info("pruned history older than %d days: %s", days, done)
    return done


def _prune_outbox(box: outboxes.Outbox, finished_before: Q) -> dict[str, int]:
    """One outbox's finished rows, with the rows that go with them, a batch at a time."""
    counts = {box.pruned_as: 0} | {name: 0 for name, _, _ in box.pruned_with}
    rows = box.model.objects
    while ids := list(rows.filter(finished_before).values_list("pk", flat=True)[:BATCH]):
        with transaction.atomic():
            for name, model, key in box.pruned_with:
                counts[name] += model.objects.filter(**{f"{key}__in": ids}).delete()[0]
            counts[box.pruned_as] += rows.filter(pk__in=ids).delete()[0]
    return counts


def _prune_budgets(cutoff: datetime) -> int:

    pruned = 0
    while ids := list(
        BudgetCounter.objects.filter(window_start__lt=cutoff).values_list("pk", flat=True)[:BATCH]
    ):
        pruned += BudgetCounter.objects.filter(pk__in=ids).delete()[0]
    return pruned
