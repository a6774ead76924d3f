"""The agent's own transitions: cancelling a pending action, reporting a result."""

from __future__ import annotations

from django.utils import timezone

from audit import log as audit
from audit.models import ActorType

from .. import events, grants
from ..errors import ActionNotPending, InvalidInput, ResultConflict
from ..models import Action, ActionStatus, Agent
from .common import _announce, _atomic, _refuse_unstorable, payload_sha256
from .selectors import _load, get_action_for_agent


def cancel_action(action_id: str, *, agent: Agent, reason: str = "") -> Action:
    _refuse_unstorable(reason=reason)
    action = get_action_for_agent(action_id, agent)
    now = timezone.now()
    with _atomic():
        updated = Action.objects.filter(
            pk=action.pk, status=ActionStatus.PENDING, expires_at__gt=now
        ).update(status=ActionStatus.CANCELLED, decided_at=now, note=reason)
        if not updated:
            raise ActionNotPending(action.pk, _load(action.pk).effective_status)
        audit.record(
            "action.cancelled",
            actor_type=ActorType.AGENT,
            actor_id=agent.name,
            actor_ref=f"agent:{agent.pk}",
            action_id=action.pk,
            data={"reason": reason},
        )
        action = _load(action.pk)
        _announce(action, "action.cancelled")
    return action


def report_result(
    action_id: str,
    *,
    agent: Agent,
    status: str,
    detail=None,
    grant: str | None = None,
    reference: str | None = None,
) -> Action:
    """Record what happened when the agent executed an approved action.

    Only an approved action takes a report. Repeating the same report is
    harmless (the same answer comes back); a different second report is refused.
    A ``grant`` must be this action's grant for its approved payload (one issued
    for another action is refused with 409); its ``jti`` goes into the trail.
    ``reference``: the processor's id for what was executed (reconciliation matches on it).
    """
    if status not in (ActionStatus.EXECUTED, ActionStatus.FAILED):
        raise InvalidInput("status", "must be executed or failed")
    _refuse_unstorable(detail=detail)
    action = get_action_for_agent(action_id, agent)
    grant_jti = None
    if grant is not None and action.was_approved:
        try:
            grant_jti = grants.check(grant, action)["jti"]
        except grants.GrantError as exc:
            raise ResultConflict(f"grant: {exc}") from None
    now = timezone.now()
    with _atomic():
        updated = Action.objects.filter(pk=action.pk, status=ActionStatus.APPROVED).update(
            status=status,
            result_status=status,
            result_detail=detail,
            result_reference=reference or "",
            reported_at=now,
        )
        if not updated:
            return _repeat_report(action.pk, status, detail, reference)
        audit.record(
            "result.reported",
            actor_type=ActorType.AGENT,
            actor_id=agent.name,
            actor_ref=f"agent:{agent.pk}",
            action_id=action.pk,
            data={
                "status": status,
                "detail": detail,
                "approved_payload_sha256": payload_sha256(action.payload),
                "grant_jti": grant_jti,
                **({"reference": reference} if reference else {}),
            },
        )
        action = _load(action.pk)
        events.publish_on_commit(action, "result.reported")
    return action


def _repeat_report(action_id: str, status: str, detail, reference: str | None = None) -> Action:
    current = _load(action_id)
    if current.result_status:
        same = current.result_detail == detail and current.result_reference == (reference or "")
        if current.result_status == status and same:
            return current
        raise ResultConflict(
            f"action {action_id} already has a result ({current.result_status}); a different report is refused"
        )
    raise ResultConflict(
        f"action {action_id} is {current.effective_status}: only an approved action can have a result reported"
    )
