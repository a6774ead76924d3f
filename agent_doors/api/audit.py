"""The audit routes: read the log, verify the chain, checkpoints."""

from __future__ import annotations

from datetime import datetime

from django.db import transaction
from ninja import Field, Query, Router, Schema, Status

from approvals import services
from approvals.errors import Forbidden, ImpriError
from approvals.schemas import (
    NO_NUL,
    Timestamp,
)
from audit import access as audit_access
from audit import export as audit_export
from audit import log as audit_log
from audit.models import ChainHead, VerificationRun

from .common import ERRORS, _reviewer

router = Router(tags=["audit"])


class AuditEventOut(Schema):
    seq: int
    scheme: int
    at: datetime
    actor_type: str
    actor_id: str
    actor_ref: str
    action_id: str
    event: str
    data: dict
    prev_hash: str
    hash: str


class AuditPage(Schema):
    items: list[AuditEventOut]
    next_after: int | None


class VerificationOut(Schema):
    ok: bool
    checked: int
    first_broken_seq: int | None
    problem: str


class CheckpointIn(Schema):
    seq: int = Field(ge=1, strict=True)  # a JSON number: not `true`, not "5"
    hash: str = Field(min_length=64, max_length=64)
    at: str = Field(max_length=40)
    signature: str = Field(min_length=64, max_length=64)


class VerifyIn(Schema):
    checkpoint: CheckpointIn


class VerificationRunOut(Schema):
    id: int
    kind: str
    status: str
    requested_by: str
    requested_at: datetime
    finished_at: datetime | None
    ok: bool | None
    checked: int
    first_broken_seq: int | None
    problem: str
    from_seq: int
    to_seq: int
    to_hash: str


class CheckpointOut(Schema):
    seq: int
    hash: str
    at: str
    signature: str


class AuditStateOut(Schema):
    checkpoint: CheckpointOut | None
    head_seq: int
    last_verified_seq: int
    runs: list[VerificationRunOut]


def _auditor(request):
    user = _reviewer(request)
    if not audit_access.is_auditor(user):
        raise Forbidden(
            "this needs the audit.audit_log permission or membership of the auditors group"
        )
    return user


@router.get("", response={200: AuditPage, **ERRORS})
def list_audit(
    request,
    action_id: str | None = Query(None, pattern=NO_NUL),
    since: Timestamp | None = None,
    until: Timestamp | None = None,
    after: int = Query(0, ge=0, le=2**63 - 1),
    limit: int = Query(100, ge=1, le=1000),
):
    """Audit events in chain order, filtered like `impri audit export`; page with `after`.

    A reviewer reads the events of an action they may review; the whole log
    (no action_id) needs the audit.audit_log permission or the auditors group.
    """
    user = _reviewer(request)
    if not audit_access.is_auditor(user):
        if not action_id:
            raise Forbidden(
                "reading the whole audit log needs the audit.audit_log permission "
                "or the auditors group; pass action_id"
            )
        services.get_action_for_reviewer(action_id, user)
    qs = audit_export.events(since=since, until=until, action_id=action_id, after=after)
    events = list(qs[: limit + 1])
    more = len(events) > limit
    events = events[:limit]
    return {"items": events, "next_after": events[-1].seq if more else None}


def _verification(result) -> dict:
    return {
        "ok": result.ok,
        "checked": result.checked,
        "first_broken_seq": result.first_broken_seq,
        "problem": result.problem,
    }


@router.get("/verify", response={200: VerificationOut, **ERRORS})
def verify_audit(request):
    """Verify from the last verified checkpoint to the chain head (only the new events)."""
    user = _reviewer(request)
    return _verification(audit_log.verify_routine(by=user.get_username()))


@router.post("/verify", response={200: VerificationOut, **ERRORS})
def verify_audit_checkpoint(request, data: VerifyIn):
    """Verify that the chain still holds a signed checkpoint and runs intact from it to the head."""
    user = _reviewer(request)
    result = audit_log.verify_checkpoint(data.checkpoint.dict(), by=user.get_username())
    return _verification(result)


@router.get("/checkpoint", response={200: AuditStateOut, **ERRORS})
def audit_state(request):
    """A signed checkpoint of the head to keep elsewhere, and the recent verification runs."""
    _auditor(request)
    runs = VerificationRun.objects.order_by("-pk")[:20]
    head = ChainHead.objects.filter(pk=1).values_list("seq", flat=True).first()
    return {
        "checkpoint": audit_log.make_checkpoint(),
        "head_seq": head or 0,
        "last_verified_seq": audit_log.last_verified().seq,
        "runs": list(runs),
    }


@router.post("/verify/full", response={202: VerificationRunOut, **ERRORS})
def verify_audit_full(request):
    """Queue a re-verification of the whole chain; poll GET /audit/verify/full/{id}."""
    user = _auditor(request)
    with transaction.atomic():
        run = audit_log.request_full_verification(by=user.get_username())
    return Status(202, run)


@router.get("/verify/full/{run_id}", response={200: VerificationRunOut, **ERRORS})
def verify_audit_full_result(request, run_id: int):
    _auditor(request)
    run = VerificationRun.objects.filter(pk=run_id).first()
    if run is None:
        raise _NotFound(f"no verification run {run_id}")
    return run


class _NotFound(ImpriError):
    status_code = 404
    code = "not_found"
