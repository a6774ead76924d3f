"""The single door for every change to an action.

REST, MCP, the inbox, admin and background tasks all call these functions.
Each change runs in one transaction that also appends its audit event, guards
its transition in SQL (``UPDATE … WHERE status = 'pending'``) so concurrent
callers get exactly one outcome, and publishes to waiters only after commit.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import logging
import math
import time
from collections.abc import Awaitable, Callable
from contextlib import contextmanager
from datetime import timedelta

from django.conf import settings
from django.contrib.auth.models import Group
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from audit import log as audit
from audit.models import ActorType, canonical_json
from impri import metrics
from rules import engine as rule_engine
from rules import services as rule_services

from . import dbexec, events, grants, outbound, outbox, stepup, waiting
from .errors import (
    ActionNotFound,
    ActionNotPending,
    Forbidden,
    IdempotencyConflict,
    InvalidInput,
    ResultConflict,
    StalePayload,
)
from .models import (
    Action,
    ActionStatus,
    Agent,
    GroupNotificationSettings,
    Notification,
    RejectReason,
    Review,
)
from .schemas import ActionIn, json_problem, resolve_path

logger = logging.getLogger(__name__)


@contextmanager
def _atomic():
    """A change's transaction: its audit events are appended together just before commit."""
    with transaction.atomic(), audit.batch():
        yield


def payload_sha256(payload: dict) -> str:
    """SHA-256 of the payload's canonical encoding (``audit.canonical``: numbers by value).

    The one digest used everywhere (push, reviews, approval, result, the four-eyes
    check): a payload as pushed and as read back from either database hash alike.
    """
    return hashlib.sha256(canonical_json(payload)).hexdigest()


def default_group() -> Group:
    group, _ = Group.objects.get_or_create(name=settings.IMPRI_DEFAULT_GROUP)
    return group


# --- Reading ------------------------------------------------------------------


def _load(action_id: str) -> Action:
    try:
        return Action.objects.select_related("agent", "decided_by_user", "review_group").get(
            pk=action_id
        )
    except Action.DoesNotExist:
        raise ActionNotFound(action_id) from None


def get_action_for_agent(action_id: str, agent: Agent) -> Action:
    action = _load(action_id)
    if action.agent_id != agent.pk:
        raise Forbidden(f"action {action_id} belongs to another agent")
    return action


def get_action_for_reviewer(action_id: str, user) -> Action:
    action = _load(action_id)
    if not can_review(user, action):
        raise ActionNotFound(action_id)
    return action


def can_review(user, action: Action) -> bool:
    if not user.is_active:
        return False
    if user.is_superuser:
        return True
    return (
        action.review_group_id is not None
        and user.groups.filter(pk=action.review_group_id).exists()
    )


# --- Push -----------------------------------------------------------------------


def push_action(
    agent: Agent, data: ActionIn, *, idempotency_key: str | None = None
) -> tuple[Action, bool]:
    """Create an action routed by the rules (pending, or decided by a rule); returns ``(action, created)``.

    A replayed idempotency key returns the existing action (``created`` is
    False) when the request is the same, and raises IdempotencyConflict when
    it differs. Concurrent pushes with one key create exactly one action: the
    database's unique constraint decides, the losers read the winner.
    """
    if idempotency_key and data.idempotency_key and idempotency_key != data.idempotency_key:
        raise InvalidInput("idempotency_key", "differs from the Idempotency-Key header")
    key = idempotency_key or data.idempotency_key
    request_hash = hashlib.sha256(
        canonical_json(data.model_dump(mode="json", exclude={"idempotency_key"}))
    ).hexdigest()
    if key:
        existing = Action.objects.filter(agent=agent, idempotency_key=key).first()
        if existing is not None:
            return _replay(existing, request_hash), False
    if data.callback_url:
        _check_callback(data.callback_url)
    try:
        with _atomic():
            action = _create(agent, data, key, request_hash)
    except IntegrityError:
        if not key:
            raise
        return _replay(Action.objects.get(agent=agent, idempotency_key=key), request_hash), False
    return action, True


def _check_callback(url: str) -> None:
    """An agent's callback must reach a public address (or one the operator allows)."""
    try:
        outbound.check_url(url)
    except outbound.Refused as exc:
        raise InvalidInput("callback_url", str(exc)) from None


def _create(agent: Agent, data: ActionIn, key: str | None, request_hash: str) -> Action:
    """Insert the action as the rules route it: pending for review, or decided by a rule."""
    now = timezone.now()
    loaded = rule_services.current_rules()
    view = {
        "kind": data.kind,
        "agent": agent.name,
        "agent_id": agent.pk,
        "payload": data.payload,
        "flags": data.flags,
        "context": data.context,
    }
    verdict = _known_group(_within_budget(rule_engine.evaluate(loaded.rules, view), view, now))
    expiries = [s for s in (data.expires_in_s, verdict.expires_in_s) if s]
    status, decided_at = {
        "auto_approve": (ActionStatus.APPROVED, now),
        "auto_reject": (ActionStatus.REJECTED, now),
    }.get(verdict.outcome, (ActionStatus.PENDING, None))
    action = Action(
        agent=agent,
        kind=data.kind,
        title=data.title,
        preview_format=data.preview.format,
        preview_body=data.preview.body,
        payload=data.payload,
        original_payload=data.payload,
        context=data.context,
        target_url=data.target_url or "",
        editable=data.editable_paths(),
        flags=data.flags,
        idempotency_key=key,
        request_hash=request_hash,
        created_at=now,
        expires_at=now
        + timedelta(seconds=min(expiries) if expiries else settings.IMPRI_DEFAULT_EXPIRES_S),
        status=status,
        decided_at=decided_at,
        decided_by_rule=(verdict.rule or "") if status != ActionStatus.PENDING else "",
        note=verdict.reason if status == ActionStatus.REJECTED else "",
        review_group=_group(verdict.group),
        approvals_required=verdict.approvals_required,
        rule_name=verdict.rule or "",
        rule_version=loaded.version,
        rule_trace=verdict.trace,
        edit_bounds=rule_engine.effective_bounds(
            data.editable_paths(), data.payload, verdict.edit_bounds, data.push_bounds()
        ),
        escalate_at=now + timedelta(seconds=verdict.escalate_after_s)
        if verdict.escalate_after_s
        else None,
        escalate_to=verdict.escalate_to or "",
        callback_url=data.callback_url or "",
    )
    action.save(force_insert=True)
    _audit_push(action, verdict, loaded.version)
    if action.status == ActionStatus.PENDING:
        events.publish_on_commit(action, "action.pushed")
        outbox.enqueue_notifications(action, action.review_group, Notification.Kind.NEW)
    else:
        _announce(action, f"action.{action.status}")
    return action


def _announce(action: Action, event: str) -> None:
    """Tell whoever waits that the action settled: waiters after commit, the agent's webhook."""
    events.publish_on_commit(action, event)
    outbox.enqueue_webhook(action, event)


def _within_budget(verdict, view: dict, now):
    """An auto-approval that would pass its rule's budget goes to review instead."""
    if verdict.outcome != "auto_approve" or verdict.budget is None:
        return verdict
    if rule_services.reserve_budget(verdict.rule, verdict.budget, view, now):
        return verdict
    budget = verdict.budget
    why = f"budget of {verdict.rule!r} ({budget.sum} max {budget.max} per {budget.per}) would be exceeded: review"
    return dataclasses.replace(
        verdict,
        outcome="review",
        budget=None,
        trace=[*verdict.trace, {"rule": verdict.rule, "matched": True, "why": why}],
    )


def _group(name: str | None) -> Group:
    """The group named, or the default group when there is none by that name (never created here)."""
    return (Group.objects.filter(name=name).first() if name else None) or default_group()


def _known_group(verdict):
    """A rule's group that does not exist routes to the default group, with a trace line saying so."""
    name = verdict.group
    if not name or name == settings.IMPRI_DEFAULT_GROUP or Group.objects.filter(name=name).exists():
        return verdict
    why = (
        f"group {name!r} does not exist: routed to the default group "
        f"{settings.IMPRI_DEFAULT_GROUP!r} instead"
    )
    return dataclasses.replace(
        verdict,
        group=None,
        trace=[*verdict.trace, {"rule": verdict.rule, "matched": True, "why": why}],
    )


def _audit_push(action: Action, verdict, version: int) -> None:
    pushed_by = {
        "actor_type": ActorType.AGENT,
        "actor_id": action.agent.name,
        "actor_ref": f"agent:{action.agent_id}",
        "action_id": action.pk,
    }
    audit.record(
        "action.pushed",
        **pushed_by,
        data={
            "kind": action.kind,
            "title": action.title,
            "payload_sha256": payload_sha256(action.payload),
            "flags": action.flags,
            "editable": action.editable,
            "edit_bounds": action.edit_bounds,
            "expires_at": action.expires_at.isoformat(),
        },
    )
    by_rule = {
        "actor_type": ActorType.RULE,
        "actor_id": action.rule_name or "(default)",
        "action_id": action.pk,
    }
    audit.record(
        "rule.matched",
        **by_rule,
        data={
            "rule": action.rule_name or None,
            "rule_version": version,
            "outcome": verdict.outcome,
            "routed_to": action.review_group.name,
            "approvals_required": action.approvals_required,
            "trace": verdict.trace,
        },
    )
    if action.status == ActionStatus.APPROVED:
        audit.record(
            "action.approved", **by_rule, data={"payload_sha256": payload_sha256(action.payload)}
        )
    elif action.status == ActionStatus.REJECTED:
        audit.record("action.rejected", **by_rule, data={"note": action.note})


def _replay(existing: Action, request_hash: str) -> Action:
    if existing.request_hash != request_hash:
        raise IdempotencyConflict(
            f"idempotency_key {existing.idempotency_key!r} was already used for a different request "
            f"(action {existing.pk})"
        )
    return _load(existing.pk)


# --- Decide ---------------------------------------------------------------------


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
    stepup.require(action_id, by=by, verdict=verdict, edits=edits)  # money needs a fresh 2nd factor
    with _atomic():
        # Locked first, checked under the lock: one read of the row, not two.
        action = _lock(action_id)
        if not can_review(by, action):
            raise Forbidden(
                f"you are not a reviewer in the group {_group_name(action)} "
                "that this action is routed to"
            )
        if idempotency_key and _is_retry(action, by, verdict, edits, idempotency_key):
            return action
        if action.is_settled:
            raise ActionNotPending(action.pk, action.effective_status)
        if verdict == "approve":
            if action.agent.is_owned_by(by):
                raise Forbidden(
                    f"you own the agent {action.agent.name!r} that asked for this action: "
                    "an owner cannot approve its own agent's actions (another reviewer must); "
                    "you may reject it"
                )
            _check_seen(action, approves_sha256)
        new_payload = apply_edits(action, edits)
        digest = payload_sha256(new_payload)
        Review.objects.update_or_create(
            action=action,
            reviewer=by,
            defaults={
                "verdict": verdict,
                "edits": edits,
                "note": note,
                "payload_sha256": digest,
                "idempotency_key": idempotency_key or "",
                "at": timezone.now(),
            },
        )
        if verdict == "reject":
            action.reject_reason = reason
            return _settle(action, by, ActionStatus.REJECTED, action.payload, edits, note)
        approvals = action.reviews.filter(
            verdict=Review.Verdict.APPROVE, payload_sha256=digest
        ).count()
        if approvals >= action.approvals_required:
            return _settle(action, by, ActionStatus.APPROVED, new_payload, edits, note)
        return _add_approval(action, by, new_payload, edits, note, approvals)


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


def _settle(action: Action, by, status: str, new_payload: dict, edits: dict, note: str) -> Action:
    now = timezone.now()
    changed = new_payload != action.original_payload
    updated = Action.objects.filter(
        pk=action.pk, status=ActionStatus.PENDING, expires_at__gt=now
    ).update(
        status=status,
        payload=new_payload,
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
        approvers = (
            action.reviews.filter(
                verdict=Review.Verdict.APPROVE, payload_sha256=data["payload_sha256"]
            )
            .order_by("at", "pk")
            .values_list("reviewer__username", "reviewer_id")
        )
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
            payload=new_payload, edited_by_human=new_payload != action.original_payload
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


def _refuse_unstorable(**values) -> None:
    """Every adapter's last wall: nothing that PostgreSQL refuses or a page can't show is stored."""
    for field, value in values.items():
        problem = json_problem(value, field)
        if problem:
            field, _, message = problem.partition(": ")
            raise InvalidInput(field, message)


def apply_edits(action: Action, edits: dict) -> dict:
    """Return the current payload with ``edits`` applied.

    Only a path listed in ``editable`` may change, to a value of the same JSON
    type, within its bounds (``edit_bounds``: the money default, the rule's, the
    agent's narrowing; ``original`` meaning the figure the agent pushed). Anything else is refused with a 422 naming ``edits.<path>``.
    """
    document = {"payload": copy.deepcopy(action.payload)}
    for path, value in edits.items():
        field = f"edits.{path}"
        if path not in action.editable:
            allowed = ", ".join(action.editable) or "none"
            raise InvalidInput(
                field, f"{path} is not editable on this action (editable: {allowed})"
            )
        _, original = resolve_path({"payload": action.original_payload}, path)
        if isinstance(value, float) and not math.isfinite(value):
            raise InvalidInput(field, "must be a finite number")
        if not _same_json_type(original, value):
            raise InvalidInput(field, f"must be a {_json_type(original)} like the original value")
        problem = rule_engine.bound_problem(edit_bounds(action, path), original, value)
        if problem:
            raise InvalidInput(field, problem)
        parent_path, _, leaf = path.rpartition(".")
        _, parent = resolve_path(document, parent_path)
        if isinstance(parent, list):
            parent[int(leaf)] = value
        else:
            parent[leaf] = value
    return document["payload"]


def edit_bounds(action: Action, path: str) -> dict:
    """The bounds an edit of ``path`` must keep to (fixed at push; see rules.engine.effective_bounds).

    An action pushed before bounds were fixed per path gets the money default.
    """
    bounds = action.edit_bounds or {}
    if path in bounds:
        return bounds[path] or {}
    return rule_engine.effective_bounds([path], action.original_payload, {}, {})[path]


def _json_type(value) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    return "string"


def _same_json_type(original, value) -> bool:
    kind = _json_type(original)
    if kind == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if isinstance(value, dict | list) or value is None:
        return False
    return _json_type(value) == kind


def _group_name(action: Action) -> str:
    return action.review_group.name if action.review_group else "(none)"


# --- Cancel, report, expire ---------------------------------------------------------


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
    action_id: str, *, agent: Agent, status: str, detail=None, grant: str | None = None
) -> Action:
    """Record what happened when the agent executed an approved action.

    Only an approved action takes a report. Repeating the same report is
    harmless (the same answer comes back); a different second report is refused.
    A ``grant`` must be this action's grant for its approved payload (one issued
    for another action is refused with 409); its ``jti`` goes into the trail.
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
            status=status, result_status=status, result_detail=detail, reported_at=now
        )
        if not updated:
            return _repeat_report(action.pk, status, detail)
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
            },
        )
        action = _load(action.pk)
        events.publish_on_commit(action, "result.reported")
    return action


def _repeat_report(action_id: str, status: str, detail) -> Action:
    current = _load(action_id)
    if current.result_status:
        if current.result_status == status and current.result_detail == detail:
            return current
        raise ResultConflict(
            f"action {action_id} already has a result ({current.result_status}); a different report is refused"
        )
    raise ResultConflict(
        f"action {action_id} is {current.effective_status}: only an approved action can have a result reported"
    )


def expire_due(now=None, batch_size: int = 500) -> int:
    """Persist the expiry of every overdue pending action; returns how many were expired.

    Idempotent: an action is expired once, by a conditional UPDATE that a
    concurrent decision (or a second sweep) can't also win.
    """
    now = now or timezone.now()
    expired = 0
    while True:
        ids = list(
            Action.objects.overdue(now)
            .order_by("expires_at")
            .values_list("pk", flat=True)[:batch_size]
        )
        if not ids:
            return expired
        for action_id in ids:
            expired += _expire_one(action_id, now)
        if len(ids) < batch_size:
            return expired


def _expire_one(action_id: str, now) -> int:
    with _atomic():
        action = Action.objects.filter(pk=action_id).only("expires_at").first()
        if action is None:
            return 0
        updated = Action.objects.filter(
            pk=action_id, status=ActionStatus.PENDING, expires_at__lte=now
        ).update(status=ActionStatus.EXPIRED, decided_at=action.expires_at)
        if not updated:
            return 0
        audit.record(
            "action.expired",
            actor_type=ActorType.SYSTEM,
            actor_id="expiry",
            action_id=action_id,
            data={"expires_at": action.expires_at.isoformat()},
        )
        _announce(_load(action_id), "action.expired")
    return 1


def escalate_due(now=None) -> int:
    """Move each pending action past its rule's ``escalate_after_s`` to the ``escalate_to`` group.

    Idempotent: the UPDATE is conditional on the action still pending and
    still carrying the escalation it was read with.
    """
    now = now or timezone.now()
    moved = 0
    due = Action.objects.filter(
        status=ActionStatus.PENDING, expires_at__gt=now, escalate_at__lte=now
    )
    for action in due.select_related("review_group").order_by("escalate_at")[:500]:
        with _atomic():
            target = _group(action.escalate_to)
            missing = target.name != action.escalate_to
            updated = Action.objects.filter(
                pk=action.pk, status=ActionStatus.PENDING, escalate_at=action.escalate_at
            ).update(review_group=target, escalate_at=None, last_reminded_at=None)
            if not updated:
                continue
            audit.record(
                "action.escalated",
                actor_type=ActorType.SYSTEM,
                actor_id="escalation",
                action_id=action.pk,
                data={
                    "from": _group_name(action),
                    "to": target.name,
                    "rule": action.rule_name or None,
                    **(
                        {"why": f"group {action.escalate_to!r} does not exist: the default group"}
                        if missing
                        else {}
                    ),
                },
            )
            outbox.enqueue_notifications(action, target, Notification.Kind.ESCALATED)
            events.publish_on_commit(
                _load(action.pk), "action.escalated", also_review_group_ids=[action.review_group_id]
            )
            moved += 1
    return moved


def remind_due(now=None) -> int:
    """Remind each group of its undecided actions every ``reminder_every_s`` (per group settings)."""
    now = now or timezone.now()
    reminded = 0
    for config in GroupNotificationSettings.objects.filter(reminder_every_s__gt=0).select_related(
        "group"
    ):
        cutoff = now - timedelta(seconds=config.reminder_every_s)
        due = Action.objects.filter(
            status=ActionStatus.PENDING,
            expires_at__gt=now,
            review_group=config.group,
            created_at__lte=cutoff,
        ).filter(Q(last_reminded_at__isnull=True) | Q(last_reminded_at__lte=cutoff))
        for action in due.order_by("created_at")[:500]:
            with _atomic():
                updated = Action.objects.filter(
                    pk=action.pk,
                    status=ActionStatus.PENDING,
                    last_reminded_at=action.last_reminded_at,
                ).update(last_reminded_at=now)
                if updated:
                    outbox.enqueue_notifications(action, config.group, Notification.Kind.REMINDER)
                    reminded += 1
    return reminded


def flag_stale(now=None) -> int:
    """Flag approved actions with no result after ``IMPRI_REPORT_DEADLINE_S``, once, and notify."""
    now = now or timezone.now()
    cutoff = now - timedelta(seconds=settings.IMPRI_REPORT_DEADLINE_S)
    flagged = 0
    due = Action.objects.filter(
        status=ActionStatus.APPROVED, stale_flagged_at__isnull=True, decided_at__lte=cutoff
    )
    for action in due.select_related("review_group").order_by("decided_at")[:500]:
        with _atomic():
            updated = Action.objects.filter(
                pk=action.pk, status=ActionStatus.APPROVED, stale_flagged_at__isnull=True
            ).update(stale_flagged_at=now)
            if not updated:
                continue
            audit.record(
                "action.stale",
                actor_type=ActorType.SYSTEM,
                actor_id="report-deadline",
                action_id=action.pk,
                data={
                    "approved_at": action.decided_at.isoformat(),
                    "deadline_s": settings.IMPRI_REPORT_DEADLINE_S,
                },
            )
            if action.review_group:
                outbox.enqueue_notifications(action, action.review_group, Notification.Kind.STALE)
            events.publish_on_commit(_load(action.pk), "action.stale")
            flagged += 1
    return flagged


# --- Await ------------------------------------------------------------------------


ProgressCallback = Callable[[float], Awaitable[None]]


async def await_decision(
    action_id: str,
    *,
    agent: Agent,
    timeout_s: float,
    on_progress: ProgressCallback | None = None,
    progress_every_s: float = 10.0,
) -> Action:
    """Wait until the action is no longer pending, or ``timeout_s`` passes.

    1. Register with the process's waiter hub (before reading, so a decision
       that lands in between is not missed).
    2. Read the row once: the row is the truth, messages are only hints.
    3. Wait on the hub, holding no thread and no connection: it wakes us on
       a channel-layer message, on its batched re-read, or on shutdown; read
       the row again only when woken.
    The final answer is read once more at the end, unless the wake's read is
    that answer. On shutdown the wait answers at once (``pending`` unless it
    was decided) so the agent asks again, possibly another process.
    """
    read = dbexec.wrap(get_action_for_agent, lane="wake")
    timeout_s = max(0.0, min(float(timeout_s), float(settings.IMPRI_MAX_AWAIT_S)))
    started = time.monotonic()
    deadline = started + timeout_s
    next_progress = started + progress_every_s
    async with waiting.hub().watch(action_id) as watch:
        action = await read(action_id, agent)
        settled_while_waiting = not action.is_settled
        while not action.is_settled:
            now = time.monotonic()
            if now >= deadline:
                break
            if on_progress is not None and now >= next_progress:
                await on_progress(now - started)
                next_progress = now + progress_every_s
            step = min(deadline, next_progress if on_progress else deadline) - now
            # Expiry needs no sweep to be seen: wake at it and answer expired.
            until_expiry = (action.expires_at - timezone.now()).total_seconds()
            why = await watch.wait(min(step, max(0.0, until_expiry) + 0.01))
            if why == "changed":
                action = await read(action_id, agent)
            elif why == "shutdown":
                break
            elif action.expires_at <= timezone.now():
                # Overdue while we waited: the row says pending, a reader sees expired.
                break
    if not action.is_settled:
        action = await read(action_id, agent)
    if settled_while_waiting and action.is_settled and action.decision_at is not None:
        metrics.observe_wake((timezone.now() - action.decision_at).total_seconds())
    return action
