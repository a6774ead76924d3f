"""Pushing an action: idempotency, the rules' routing, the insert and its audit."""

from __future__ import annotations

import dataclasses
import hashlib
from datetime import timedelta

from django.conf import settings
from django.contrib.auth.models import Group
from django.db import IntegrityError
from django.utils import timezone

from audit import log as audit
from audit.models import ActorType, canonical_json
from plumbing import outbound
from rules import engine as rule_engine
from rules import kinds as rule_kinds
from rules import services as rule_services
from rules.bounds import effective_bounds
from rules.detector import may_be_currency
from rules.money import currency_paths, ijson_problem

from .. import events, group_cache, money, outbox
from ..errors import IdempotencyConflict, InvalidInput
from ..models import Action, ActionStatus, Agent, Notification
from ..schemas import ActionIn
from ..schemas.inputs import reserved_key_problem
from .common import _announce, _atomic, default_group, payload_sha256
from .selectors import _load


def push_action(
    agent: Agent,
    data: ActionIn,
    *,
    idempotency_key: str | None = None,
    money: list[dict] | None = None,
) -> tuple[Action, bool]:
    """Create an action routed by the rules (pending, or decided by a rule); returns ``(action, created)``.

    A replayed idempotency key returns the existing action (``created`` is
    False) when the request is the same, and raises IdempotencyConflict when
    it differs. Concurrent pushes with one key create exactly one action: the
    database's unique constraint decides, the losers read the winner.

    The payload must be I-JSON, and must keep what its kind declares (the
    rules file's ``kinds:``, the defaults for ``payment.*``, or ``money``: a
    gateway tool's declaration, ``[{amount: payload.<path>, currency: …}]``,
    which takes the place of the kind's): its JSON Schema and its amounts.
    A breach is InvalidInput naming the path. The declaration is fixed on the
    action, and every money guard reads it from there.
    """
    if idempotency_key and data.idempotency_key and idempotency_key != data.idempotency_key:
        raise InvalidInput("idempotency_key", "differs from the Idempotency-Key header")
    if idempotency_key and reserved_key_problem(idempotency_key):  # the body's: ActionIn's check
        raise InvalidInput("Idempotency-Key", reserved_key_problem(idempotency_key))
    key = idempotency_key or data.idempotency_key
    # ``supersedes`` counts only when given, so a push hashes as it did before the field existed.
    unhashed = {"idempotency_key"} | ({"supersedes"} if data.supersedes is None else set())
    request_hash = hashlib.sha256(
        canonical_json(data.model_dump(mode="json", exclude=unhashed))
    ).hexdigest()
    # A retry comes when the caller timed out, often under load: answering it from
    # one read keeps it from taking the write lock (SQLite's is the whole database's)
    # and a budget row's lock just to lose on the unique constraint. The same read
    # brings the rule set's revision and the groups its rules route to.
    first = _first_read(agent, key)
    if first.existing is not None:
        return _replay(first.existing, request_hash), False
    if data.callback_url:
        _check_callback(data.callback_url)
    if data.supersedes:
        check_supersedes(agent, data.supersedes)
    loaded = rule_services.current_rules(known=first.revision)
    declared = _declaration(loaded, data, money)
    try:
        with _atomic():
            action = _create(agent, data, key, request_hash, loaded, declared, first.groups)
    except IntegrityError:
        existing = _with_key(agent, key) if key else None
        if existing is not None:  # a concurrent push with the same key won
            return _replay(existing, request_hash), False
        if data.supersedes:  # a concurrent push replaced the same action first: say which
            check_supersedes(agent, data.supersedes)
        raise
    return action, True


@dataclasses.dataclass(frozen=True)
class _FirstRead:
    existing: Action | None  # the agent's action with this idempotency key
    revision: tuple[int, str]  # the rule set's (version, revision), as rules.services reads it
    groups: _KnownGroups


@dataclasses.dataclass(frozen=True)
class _KnownGroups:
    asked: frozenset[str]  # the names looked for
    found: dict[str, Group]  # those that exist, by name


def _first_read(agent: Agent, key: str | None) -> _FirstRead:
    """What a push reads before its transaction: the idempotency key's action (``_with_key``),
    the rule set's version and revision (``rules.services.read_revision``) and the groups the
    rules this process holds route to, with the default group (``_groups_named``).

    The revision and the groups come from this process's cache while the groups' generation
    holds (``approvals.group_cache``: a rule-set change, a group created, renamed or deleted
    moves it, in every process), the rules per revision. When the revision moved, the new
    rules may route elsewhere: a group this read did not ask for is read on its own
    (``_routed_group``).
    """
    names = rule_services.cached_group_names() | {settings.IMPRI_DEFAULT_GROUP}
    existing = _with_key(agent, key) if key else None
    cached = group_cache.Reading()  # one look at the groups' generation for both
    revision = cached.cached("rules", "revision", rule_services.read_revision)
    found = cached.groups_named(names)
    return _FirstRead(existing, revision, _KnownGroups(frozenset(names), found))


def _with_key(agent: Agent, key: str) -> Action | None:
    """The agent's action with this idempotency key, if any (enough of it for ``_replay``)."""
    # Sliced, not .first(), and without the model's ordering: the pair is unique, and an
    # ORDER BY would be compiled (and sorted) for nothing.
    found = (
        Action.objects.filter(agent=agent, idempotency_key=key)
        .order_by()
        .only("id", "idempotency_key", "request_hash")[:1]
    )
    return next(iter(found), None)


def _groups_named(first: str, second: str) -> dict[str, Group]:
    """The groups of these names that exist, by name (``group_cache``)."""
    return group_cache.groups_named({first, second})


def _check_callback(url: str) -> None:
    """An agent's callback must reach a public address (or one the operator allows)."""
    try:
        outbound.check_url(url)
    except outbound.Refused as exc:
        raise InvalidInput("callback_url", str(exc)) from None


def _declaration(loaded, data: ActionIn, override: list[dict] | None):
    """What the action's kind declares, after checking the payload keeps it (InvalidInput if not)."""
    problem = ijson_problem(data.payload, "payload")
    if problem:
        field, _, message = problem.partition(": ")
        raise InvalidInput(field, message)
    if override is not None:
        declared = rule_kinds.KindSpec(data.kind, rule_kinds.parse_money(override, data.kind))
    else:
        declared = loaded.declaration(data.kind)
    _check_currency_fixed(data, declared)
    if declared is None:
        return None
    problems = rule_kinds.payload_problems(declared, data.payload)
    if problems:
        path, message = problems[0]
        raise InvalidInput(path, f"{message} ({data.kind} declares it)")
    return declared


def _check_currency_fixed(data: ActionIn, declared) -> None:
    """The currency never changes: a path it is read from may not be listed in ``editable``.

    A declared kind's currency paths; for a kind that declares no money, any field that may
    hold one (``rules.detector.may_be_currency``: ``ccy``, ``currencyIsoCode``, a value "GBP"…).
    """
    document = {"payload": data.payload}
    if declared is not None and declared.money is not None:
        fixed = currency_paths(document, list(declared.money))
    else:
        fixed = {
            p
            for p in data.editable_paths()
            if may_be_currency(p.rpartition(".")[2], rule_engine.lookup(document, p))
        }
    for index, path in enumerate(data.editable_paths()):
        if path in fixed:
            raise InvalidInput(
                f"editable[{index}]",
                f"{path} is the action's currency, which never changes: an edit may change "
                "an amount, not what it is counted in",
            )


def _create(
    agent: Agent,
    data: ActionIn,
    key: str | None,
    request_hash: str,
    loaded,
    declared,
    groups: _KnownGroups | None = None,
) -> Action:
    """Insert the action as the rules route it: pending for review, or decided by a rule."""
    now = timezone.now()
    view = {
        "kind": data.kind,
        "agent": agent.name,
        "agent_id": agent.pk,
        "payload": data.payload,
        "flags": data.flags,
        "context": data.context,
        # What budgets of ``sum: amount`` read (rules.money): the declaration, or None.
        "money": [m.as_dict() for m in declared.money]
        if declared is not None and declared.money is not None
        else None,
    }
    verdict = rule_engine.evaluate(loaded.rules, view)
    if view["money"] is None and settings.IMPRI_UNDECLARED_KINDS != "detect":
        verdict = rule_kinds.hold_undeclared(verdict, data.kind)  # the closed world (issue 39)
    verdict = rule_kinds.hold_at_step_up(verdict, view, settings.IMPRI_STEP_UP_CENTS)
    verdict, group = _routed_group(_within_budget(verdict, view, now), groups)
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
        review_group=group,
        approvals_required=verdict.approvals_required,
        rule_name=verdict.rule or "",
        rule_version=loaded.version,
        rule_trace=verdict.trace,
        money=[m.as_dict() for m in declared.money]
        if declared is not None and declared.money is not None
        else None,
        escalate_at=now + timedelta(seconds=verdict.escalate_after_s)
        if verdict.escalate_after_s
        else None,
        escalate_to=verdict.escalate_to or "",
        callback_url=data.callback_url or "",
        supersedes_id=data.supersedes or None,
    )
    found = money.amounts(action)  # read once: the edit bounds and the amount columns
    action.edit_bounds = effective_bounds(
        action.editable,
        data.payload,
        verdict.edit_bounds,
        data.push_bounds(),
        money.money_paths(action, found=found),
        closed=money.is_closed(action),
    )
    action.amount_minor, action.amount_currency = money.stored_amount(action, found=found)
    action.save(force_insert=True)
    _audit_push(action, verdict, loaded.version)
    if action.status == ActionStatus.PENDING:
        events.publish_on_commit(action, "action.pushed")
        outbox.enqueue_notifications(action, action.review_group, Notification.Kind.NEW)
    else:
        _announce(action, f"action.{action.status}", new=True)
    return action


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


def _routed_group(verdict, known: _KnownGroups | None = None) -> tuple:
    """The verdict and the group it routes to, read with the default group.

    ``known``: the groups the push's first read looked for; when it asked for both
    names they are not read again, else one query reads them. A rule's group that does
    not exist routes to the default group, with a trace line saying so.
    """
    name, default = verdict.group, settings.IMPRI_DEFAULT_GROUP
    if known is not None and {name or default, default} <= known.asked:
        found = known.found
    else:
        found = _groups_named(name or default, default)
    if name in found:
        return verdict, found[name]
    fallback = found.get(default) or default_group()
    if not name or name == default:
        return verdict, fallback
    why = f"group {name!r} does not exist: routed to the default group {default!r} instead"
    trace = [*verdict.trace, {"rule": verdict.rule, "matched": True, "why": why}]
    return dataclasses.replace(verdict, group=None, trace=trace), fallback


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
            **({"supersedes": action.supersedes_id} if action.supersedes_id else {}),
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


def check_supersedes(agent: Agent, action_id: str) -> None:
    """A push may replace an earlier action of the same agent that was settled without approval."""
    earlier = Action.objects.filter(pk=action_id).only("agent_id", "status", "expires_at").first()
    if earlier is None or earlier.agent_id != agent.pk:
        raise InvalidInput("supersedes", f"names no action of this agent ({action_id!r})")
    status = earlier.effective_status
    if status == ActionStatus.PENDING:
        raise InvalidInput(
            "supersedes", f"{action_id} is still pending: cancel it first, or await its decision"
        )
    if earlier.was_approved:
        raise InvalidInput("supersedes", f"{action_id} was approved ({status}): nothing to replace")
    successor = Action.objects.filter(supersedes_id=action_id).values_list("pk", flat=True).first()
    if successor:
        raise InvalidInput("supersedes", f"{action_id} is already replaced by {successor}")
