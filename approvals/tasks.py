"""Celery tasks: each one calls an idempotent sweep, so running it twice changes nothing."""

from __future__ import annotations

from celery import shared_task

from . import notify, services, webhooks


@shared_task
def expire_overdue() -> int:
    return services.expire_due()


@shared_task
def escalate_overdue() -> int:
    return services.escalate_due()


@shared_task
def send_reminders() -> int:
    return services.remind_due()


@shared_task
def flag_stale_approvals() -> int:
    return services.flag_stale()


# The two delivery tasks hand due rows to their lane's threads in this worker
# process and return at once (approvals.lanes): a receiver that never answers
# holds a lane thread, never a Celery worker slot, so expiry and the other
# lane keep running. The outbox's lease keeps one sender per row.


@shared_task
def deliver_webhooks() -> int:
    return webhooks.deliver_in_background()


@shared_task
def send_notifications() -> int:
    return notify.send_in_background()


@shared_task
def prune_history() -> dict:
    from . import retention

    return retention.prune()


@shared_task
def verify_audit_chain() -> bool:
    from audit import verification

    return verification.verify_scheduled().ok
