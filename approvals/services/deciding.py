"""A reviewer's decision: approve (with edits, four eyes) or reject."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.db.models import Exists
from django.utils import timezone

from audit import log as audit
from audit.models import ActorType

from .. import events, money, stepup
from ..errors import (
    ActionNotFound,
    ActionNotPending,
    Forbidden,
    IdempotencyConflict,
    InvalidInput,
    StalePayload,
)
from ..models import Action, ActionStatus, Agent, RejectReason, Review
from ..schemas import resolve_path
from .common import _announce, _atomic, _refuse_unstorable, payload_sha256
from .edits import apply_edits
from .selectors import _load


def decide(
    action_id: str,
    *,
    by,
    verdict: str,
    edits: dict | None = None,
    note: str = "",
    reason: str = "",
    idempotency_key: str | None = None,
    approves_sha256: str | None = None,
) -> Action:
    """Record a reviewer's approval (optionally with edits) or rejection.

    One rejection rejects. An approval settles the action once
    ``approvals_required`` distinct reviewers have approved the same payload
    (an edit starts the count again, since earlier approvals were for other
    figures). An approval names the payload it approves (``approves_sha256``,
    the hash of the payload the reviewer saw, before their own edits): a
    mismatch, or none once another reviewer changed the payload, is
    StalePayload (409 with the current figure). The action row is locked for
    the whole decision and every transition is a conditional UPDATE, so
    concurrent reviewers, a retry or the expiry sweep produce exactly one
    outcome; losers get ActionNotPending.
    A retry of the same reviewer's decision with the same ``idempotency_key``
    (same verdict and edits) returns the action as it is now instead.
    """
    if verdict not in ("approve", "reject"):
        raise InvalidInput("verdict", "must be approve or reject")
    edits = edits or {}
    if verdict == "reject" and edits:
        raise InvalidInput("edits", "a rejection cannot carry edits")
    if reason and (verdict != "reject" or reason not in RejectReason.values):
        raise InvalidInput(
            "reason", f"must be one of {', '.join(RejectReason.values)}, and only on a rejection"
        )
    _refuse_unstorable(note=note, **{f"edits.{path}": value for path, value in edits.items()})
    try:
        return _decide(
            action_id, by, verdict, edits, note, reason, idempotency_key, approves_sha256
        )
    except stepup.Refused as refused:  # rolled back; the refusal is kept
        raise stepup.refuse(refused) from None


def _decide(action_id, by, verdict, edits, note, reason, idempotency_key, approves_sha256):
    with _atomic():
        # Locked first, checked under the lock: one read of the row, not two.
        action = _lock(action_id)
        may_review, owns = _standing(by, action, owner=verdict == "approve")
        if not may_review:  # 404 like an unknown id: no word on other groups
            raise ActionNotFound(action_id)
        if idempotency_key and _is_retry(action, by, verdict, edits, idempotency_key):
            return action
        if action.is_settled:
            raise ActionNotPending(action.pk, action.effective_status)
        if verdict == "approve":
            if owns:
                raise Forbidden(
                    f"you own the agent {action.agent.name!r} that asked for this action: "
                    "an owner cannot approve its own agent's actions (another reviewer must); "
                    "you may reject it"
                )
            _check_seen(action, approves_sha256)
        new_payload = apply_edits(action, edits)
        if verdict == "approve":  # money needs a fresh second factor: the figure approved
            stepup.check(action, by=by, payload=new_payload)
        digest = payload_sha256(new_payload)
        _put_review(action, by, verdict, edits, note, digest, idempotency_key or "")
        if verdict == "reject":
            action.reject_reason = reason
            return _settle(action, by, ActionStatus.REJECTED, action.payload, edits, note)
        # The approvals of this payload, counted and named in one read (the settling
        # audit event names them).
        approvers = _approvers(action.pk, digest)
        if len(approvers) >= action.approvals_required:
            return _settle(
                action, by, ActionStatus.APPROVED, new_payload, edits, note, approvers=approvers
            )
        return _add_approval(action, by, new_payload, edits, note, len(approvers))


def request_changes(action_id: str, *, by, note: str, idempotency_key: str | None = None) -> Action:
    """Settle the action as ``changes_requested``: not approved, terminal, with the reviewer's message.

    The third answer beside approve and reject: any reviewer of the action's
    group may give it (an owner too, as with a rejection), and one settles the
    action, whatever ``approvals_required`` says. No result can be reported on
    it; the agent reads ``note`` and may push a corrected action naming this
    one in ``supersedes``. Guarded like ``decide``: row lock, conditional
    UPDATE, a retry with the same ``idempotency_key`` returns the action.
    """
    note = (note or "").strip()
    if not note:
        raise InvalidInput("note", "say what should change: the agent reads this message")
    _refuse_unstorable(note=note)
    with _atomic():
        action = _lock(action_id)
        if not _standing(by, action, owner=False)[0]:  # 404 like an unknown id
            raise ActionNotFound(action_id)
        verdict = Review.Verdict.CHANGES
        if idempotency_key and _is_retry(action, by, verdict, {}, idempotency_key):
            return action
        if action.is_settled:
            raise ActionNotPending(action.pk, action.effective_status)
        _put_review(
            action, by, verdict, {}, note, payload_sha256(action.payload), idempotency_key or ""
        )
        action.reject_reason = ""
        return _settle(action, by, ActionStatus.CHANGES_REQUESTED, action.payload, {}, note)


def _is_retry(action: Action, by, verdict: str, edits: dict, key: str) -> bool:
    """True when ``by`` already made this decision under ``key``; 409 when the key
    was used for a different decision."""
    earlier = action.reviews.filter(reviewer=by, idempotency_key=key).first()
    if earlier is None:
        return False
    if earlier.verdict != verdict or earlier.edits != edits:
        raise IdempotencyConflict(
            f"Idempotency-Key {key!r} was already used for a different decision on {action.pk}"
        )
    return True


def _check_seen(action: Action, seen: str | None) -> None:
    """Four eyes approve the same figure: the approval must name the payload as it stands."""
    current = payload_sha256(action.payload)
    if seen is None and current == payload_sha256(action.original_payload):
        return
    if seen == current:
        return
    changes = "; ".join(
        f"{path} is now {after!r} (the agent asked {before!r})"
        for path, before, after in _changed_paths(action)
    )
    if seen is None:
        why = (
            "the payload changed since the action was created, so an approval must name the "
            "payload it approves (payload_sha256)"
        )
    elif changes:
        why = "the payload changed since you saw it"
    else:
        why = "payload_sha256 does not name this action's payload"
    raise StalePayload(
        f"{why}: {changes or 'it differs from what you saw'}. Review the current payload "
        f"and approve it with payload_sha256 {current}",
        payload=action.payload,
        payload_sha256=current,
    )


def _changed_paths(action: Action) -> list[tuple[str, object, object]]:
    out = []
    for path in action.editable:
        before = resolve_path({"payload": action.original_payload}, path)[1]
        after = resolve_path({"payload": action.payload}, path)[1]
        if before != after:
            out.append((path, before, after))
    return out


def _lock(action_id: str) -> Action:
    try:
        # Not joined with the review group: when the row was changed while we
        # waited for it (an escalation), PostgreSQL re-checks the locked row but
        # keeps the joined group row it read first, so the group would come back
        # empty. Read lazily, the group is the one the locked row names.
        return (
            Action.objects.select_for_update(of=("self",)).select_related("agent").get(pk=action_id)
        )
    except Action.DoesNotExist:
        raise ActionNotFound(action_id) from None


def _settle(
    action: Action,
    by,
    status: str,
    new_payload: dict,
    edits: dict,
    note: str,
    *,
    approvers: list[tuple[str, int]] | None = None,
) -> Action:
    now = timezone.now()
    changed = new_payload != action.original_payload
    updated = Action.objects.filter(
        pk=action.pk, status=ActionStatus.PENDING, expires_at__gt=now
    ).update(
        status=status,
        payload=new_payload,
        **_amount_columns(action, new_payload),
        edited_by_human=changed,
        decided_by_user=by,
        decided_at=now,
        note=note,
        reject_reason=action.reject_reason,
    )
    if not updated:
        raise ActionNotPending(action.pk, _load(action.pk).effective_status)
    _audit_edit(action, by, edits, new_payload)
    data = {"note": note, "rule": action.rule_name or None, "rule_version": action.rule_version}
    if action.reject_reason:
        data["reason"] = action.reject_reason
    if status == ActionStatus.APPROVED:
        data["payload_sha256"] = payload_sha256(new_payload)
        if approvers is None:
            approvers = _approvers(action.pk, data["payload_sha256"])
        data["approved_by"] = [name for name, _ in approvers]
        data["approved_by_refs"] = [f"user:{pk}" for _, pk in approvers]
    audit.record(
        f"action.{status}",
        actor_type=ActorType.REVIEWER,
        actor_id=by.get_username(),
        actor_ref=f"user:{by.pk}",
        action_id=action.pk,
        data=data,
    )
    # The row is locked and was just written: the object is made to match it,
    # not read again.
    action.status, action.payload, action.edited_by_human = status, new_payload, changed
    action.decided_by_user, action.decided_at, action.note = by, now, note
    _announce(action, f"action.{status}")
    return action


def _add_approval(
    action: Action, by, new_payload: dict, edits: dict, note: str, approvals: int
) -> Action:
    """A partial approval: the action stays pending, possibly with the edited payload."""
    if new_payload != action.payload:
        Action.objects.filter(pk=action.pk, status=ActionStatus.PENDING).update(
            payload=new_payload,
            **_amount_columns(action, new_payload),
            edited_by_human=new_payload != action.original_payload,
        )
        _audit_edit(action, by, edits, new_payload)
    audit.record(
        "review.approved",
        actor_type=ActorType.REVIEWER,
        actor_id=by.get_username(),
        actor_ref=f"user:{by.pk}",
        action_id=action.pk,
        data={
            "note": note,
            "payload_sha256": payload_sha256(new_payload),
            "approvals": approvals,
            "approvals_required": action.approvals_required,
        },
    )
    if new_payload != action.payload:
        action.payload = new_payload
        action.edited_by_human = new_payload != action.original_payload
    events.publish_on_commit(action, "review.approved")
    return action


def _amount_columns(action: Action, payload: dict) -> dict:
    """The amount columns (``Action.amount_minor``, ``amount_currency``) for ``payload``."""
    minor, currency = money.stored_amount(action, payload)
    return {"amount_minor": minor, "amount_currency": currency}


def _audit_edit(action: Action, by, edits: dict, new_payload: dict) -> None:
    changes = {
        path: _before_after(action.payload, new_payload, path)
        for path in sorted(edits)
        if resolve_path({"payload": action.payload}, path)[1] != edits[path]
    }
    if changes:
        audit.record(
            "action.edited",
            actor_type=ActorType.REVIEWER,
            actor_id=by.get_username(),
            actor_ref=f"user:{by.pk}",
            action_id=action.pk,
            data={"changes": changes},
        )


def _before_after(original: dict, approved: dict, path: str) -> dict:
    return {
        "before": resolve_path({"payload": original}, path)[1],
        "after": resolve_path({"payload": approved}, path)[1],
    }


# --- The decision's reads and its review's write, each one statement ---------------------


def _standing(by, action: Action, *, owner: bool) -> tuple[bool, bool]:
    """(may ``by`` review the action, does ``by`` own its agent): one read for both.

    ``selectors.can_review`` and ``Agent.is_owned_by`` as two ``Exists`` in one
    statement; none when neither needs the database (an inactive user, a superuser
    rejecting).
    """
    if not by.is_active:
        return False, False
    in_group = not by.is_superuser and action.review_group_id is not None
    if not in_group and not owner:
        return by.is_superuser, False
    User = get_user_model()
    member, owns = (
        User.objects.filter(pk=by.pk)
        .annotate(
            member=Exists(
                User.groups.through.objects.filter(user_id=by.pk, group_id=action.review_group_id)
            ),
            owns=Exists(
                Agent.owners.through.objects.filter(agent_id=action.agent_id, user_id=by.pk)
            ),
        )
        .values_list("member", "owns")
        .get()
    )
    return bool(by.is_superuser or member), bool(owner and owns)


def _put_review(action: Action, by, verdict, edits, note, digest, key) -> None:
    """The one review per reviewer and action (its unique constraint): written, or
    rewritten in place, in one ``INSERT … ON CONFLICT DO UPDATE`` (no savepoint)."""
    Review.objects.bulk_create(
        [
            Review(
                action_id=action.pk,
                reviewer_id=by.pk,
                verdict=str(verdict),
                edits=edits,
                note=note,
                payload_sha256=digest,
                idempotency_key=key,
                at=timezone.now(),
            )
        ],
        update_conflicts=True,
        unique_fields=["action", "reviewer"],
        update_fields=["verdict", "edits", "note", "payload_sha256", "idempotency_key", "at"],
    )


def _approvers(action_id: str, digest: str) -> list[tuple[str, int]]:
    """(username, user id) of the approvals of the payload ``digest``, first first."""
    return list(
        Review.objects.filter(
            action_id=action_id, verdict=Review.Verdict.APPROVE, payload_sha256=digest
        )
        .order_by("at", "pk")
        .values_list(f"reviewer__{get_user_model().USERNAME_FIELD}", "reviewer_id")
    )
