"""Celery task for the audit log's background work."""

from __future__ import annotations

from celery import shared_task

from . import log, verification


@shared_task
def run_full_verifications() -> int:
    return log.run_full_verifications()


@shared_task
def verify_audit_chain() -> bool:
    return verification.verify_scheduled().ok
