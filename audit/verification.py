"""Verify the chain and keep the outcome, so metrics and the admin can report it."""

from __future__ import annotations

from django.utils import timezone

from . import log
from .models import ChainVerification


def verify_and_record(*, checkpoints: list[dict] = ()) -> log.Verification:
    """Run a full verify and store its outcome as the latest one."""
    result = log.verify(checkpoints=checkpoints)
    ChainVerification.objects.update_or_create(
        pk=1,
        defaults={
            "at": timezone.now(),
            "ok": result.ok,
            "checked": result.checked,
            "first_broken_seq": result.first_broken_seq,
            "problem": result.problem,
        },
    )
    return result


def latest() -> ChainVerification | None:
    return ChainVerification.objects.filter(pk=1).first()
