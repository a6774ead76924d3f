"""Celery tasks: each one calls an idempotent sweep, so running it twice changes nothing."""

from __future__ import annotations

from celery import shared_task

from . import services


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
