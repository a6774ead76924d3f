"""The ledger's periodic jobs (impri/schedule.py): the unsettled sweep and its notices' lane."""

from __future__ import annotations

from celery import shared_task

from . import notices, services


@shared_task
def sweep_unsettled() -> dict:
    return services.sweep()


@shared_task
def send_notices() -> int:
    return notices.OUTBOX.send_in_background()
