"""The reviewer's routes: approve (with edits), reject, request changes."""

from __future__ import annotations

from ninja import Router

from approvals import services, stepup
from approvals.presenters import action_out
from approvals.schemas import (
    ActionOut,
    ChangesIn,
    DecisionIn,
    RejectIn,
)

from .common import ERRORS, IDEMPOTENCY_HEADER, ActionId, _base, _key, _reviewer

router = Router(tags=["actions"])


@router.post("/actions/{action_id}/approve", response={200: ActionOut, **ERRORS})
def approve(
    request,
    action_id: ActionId,
    data: DecisionIn | None = None,
    idempotency_key: str | None = IDEMPOTENCY_HEADER,
):
    data = data or DecisionIn()
    reviewer = _reviewer(request)
    with stepup.via_token(request.auth.key):  # a service token can't approve at the step-up limit
        action = services.decide(
            action_id,
            by=reviewer,
            verdict="approve",
            edits=data.edits,
            note=data.note,
            idempotency_key=_key(idempotency_key),
            approves_sha256=data.payload_sha256.lower() if data.payload_sha256 else None,
        )
    return action_out(action, _base(request))


@router.post("/actions/{action_id}/reject", response={200: ActionOut, **ERRORS})
def reject(
    request,
    action_id: ActionId,
    data: RejectIn | None = None,
    idempotency_key: str | None = IDEMPOTENCY_HEADER,
):
    data = data or RejectIn()
    action = services.decide(
        action_id,
        by=_reviewer(request),
        verdict="reject",
        note=data.note,
        reason=data.reason or "",
        idempotency_key=_key(idempotency_key),
    )
    return action_out(action, _base(request))


@router.post("/actions/{action_id}/request-changes", response={200: ActionOut, **ERRORS})
def request_changes(
    request,
    action_id: ActionId,
    data: ChangesIn,
    idempotency_key: str | None = IDEMPOTENCY_HEADER,
):
    """Settle the action as changes_requested: not approved, final, with your message to the agent."""
    action = services.request_changes(
        action_id, by=_reviewer(request), note=data.note, idempotency_key=_key(idempotency_key)
    )
    return action_out(action, _base(request))
