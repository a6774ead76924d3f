"""The periodic sweeps: expiry, escalation, reminders, stale approvals. Each is idempotent."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from audit import log as audit
from audit.models import ActorType

from .. import events, outbox
from ..models import Action, ActionStatus, GroupNotificationSettings, Notification
from .common import _announce, _atomic, _group, _group_name
from .selectors import _load


def expire_due(now=None, batch_size: int = 500) -> int:
    """Persist the expiry of every overdue pending action; returns how many were expired.

    Idempotent: an action is expired once, by a conditional UPDATE that a
    concurrent decision (or a second sweep) can't also win.
    """
    now = now or timezone.now()
    expired = 0
    while True:
        ids = list(
            Action.objects.overdue(now)
            .order_by("expires_at")
            .values_list("pk", flat=True)[:batch_size]
        )
        if not ids:
            return expired
        for action_id in ids:
            expired += _expire_one(action_id, now)
        if len(ids) < batch_size:
            return expired


def _expire_one(action_id: str, now) -> int:
    with _atomic():
        action = Action.objects.filter(pk=action_id).only("expires_at").first()
        if action is None:
            return 0
        updated = Action.objects.filter(
            pk=action_id, status=ActionStatus.PENDING, expires_at__lte=now
        ).update(status=ActionStatus.EXPIRED, decided_at=action.expires_at)
        if not updated:
            return 0
        audit.record(
            "action.expired",
            actor_type=ActorType.SYSTEM,
            actor_id="expiry",
            action_id=action_id,
            data={"expires_at": action.expires_at.isoformat()},
        )
        _announce(_load(action_id), "action.expired")
    return 1


def escalate_due(now=None) -> int:
    """Move each pending action past its rule's ``escalate_after_s`` to the ``escalate_to`` group.

    Idempotent: the UPDATE is conditional on the action still pending and
    still carrying the escalation it was read with.
    """
    now = now or timezone.now()
    moved = 0
    due = Action.objects.filter(
        status=ActionStatus.PENDING, expires_at__gt=now, escalate_at__lte=now
    )
    for action in due.select_related("review_group").order_by("escalate_at")[:500]:
        with _atomic():
            target = _group(action.escalate_to)
            missing = target.name != action.escalate_to
            updated = Action.objects.filter(
                pk=action.pk, status=ActionStatus.PENDING, escalate_at=action.escalate_at
            ).update(review_group=target, escalate_at=None, last_reminded_at=None)
            if not updated:
                continue
            audit.record(
                "action.escalated",
                actor_type=ActorType.SYSTEM,
                actor_id="escalation",
                action_id=action.pk,
                data={
                    "from": _group_name(action),
                    "to": target.name,
                    "rule": action.rule_name or None,
                    **(
                        {"why": f"group {action.escalate_to!r} does not exist: the default group"}
                        if missing
                        else {}
                    ),
                },
            )
            outbox.enqueue_notifications(action, target, Notification.Kind.ESCALATED)
            events.publish_on_commit(
                _load(action.pk), "action.escalated", also_review_group_ids=[action.review_group_id]
            )
            moved += 1
    return moved


def remind_due(now=None) -> int:
    """Remind each group of its undecided actions every ``reminder_every_s`` (per group settings)."""
    now = now or timezone.now()
    reminded = 0
    for config in GroupNotificationSettings.objects.filter(reminder_every_s__gt=0).select_related(
        "group"
    ):
        cutoff = now - timedelta(seconds=config.reminder_every_s)
        due = Action.objects.filter(
            status=ActionStatus.PENDING,
            expires_at__gt=now,
            review_group=config.group,
            created_at__lte=cutoff,
        ).filter(Q(last_reminded_at__isnull=True) | Q(last_reminded_at__lte=cutoff))
        for action in due.order_by("created_at")[:500]:
            with _atomic():
                updated = Action.objects.filter(
                    pk=action.pk,
                    status=ActionStatus.PENDING,
                    last_reminded_at=action.last_reminded_at,
                ).update(last_reminded_at=now)
                if updated:
                    outbox.enqueue_notifications(action, config.group, Notification.Kind.REMINDER)
                    reminded += 1
    return reminded


def flag_stale(now=None) -> int:
    """Flag approved actions with no result after ``IMPRI_REPORT_DEADLINE_S``, once, and notify."""
    now = now or timezone.now()
    cutoff = now - timedelta(seconds=settings.IMPRI_REPORT_DEADLINE_S)
    flagged = 0
    due = Action.objects.filter(
        status=ActionStatus.APPROVED, stale_flagged_at__isnull=True, decided_at__lte=cutoff
    )
    for action in due.select_related("review_group").order_by("decided_at")[:500]:
        with _atomic():
            updated = Action.objects.filter(
                pk=action.pk, status=ActionStatus.APPROVED, stale_flagged_at__isnull=True
            ).update(stale_flagged_at=now)
            if not updated:
                continue
            audit.record(
                "action.stale",
                actor_type=ActorType.SYSTEM,
                actor_id="report-deadline",
                action_id=action.pk,
                data={
                    "approved_at": action.decided_at.isoformat(),
                    "deadline_s": settings.IMPRI_REPORT_DEADLINE_S,
                },
            )
            if action.review_group:
                outbox.enqueue_notifications(action, action.review_group, Notification.Kind.STALE)
            events.publish_on_commit(_load(action.pk), "action.stale")
            flagged += 1
    return flagged
