"""The chain's latest verification, for metrics and the admin index.

Every verification (routine, against a checkpoint, full) is kept as a
``VerificationRun`` by ``audit.log``; this module runs the scheduled one and
names the latest finished run.
"""

from __future__ import annotations

from . import log
from .models import VerificationRun


def verify_and_record(*, checkpoints: list[dict] = (), by: str = "schedule") -> log.Verification:
    """A full verification now, recorded as a run (the admin's button, the CLI)."""
    return log.verify_full_now(by=by, checkpoints=checkpoints)


def verify_scheduled() -> log.Verification:
    """The periodic check: from the last verified run to the head (only new events)."""
    return log.verify_routine(by="schedule")


def latest() -> VerificationRun | None:
    return (
        VerificationRun.objects.filter(status=VerificationRun.Status.DONE)
        .order_by("-finished_at", "-pk")
        .first()
    )
