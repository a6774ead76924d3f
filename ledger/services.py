"""The ledger's one door: record a movement, match it, settle an action's state, explain.

Every change runs in one transaction with its audit events (``ledger.movement_recorded``,
``ledger.matched``, ``ledger.exception``, ``ledger.explained``); an exception's notices are
written in the same transaction (``notices.enqueue``), once per exception.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from approvals import money as action_money
from approvals.errors import Conflict, Forbidden, ImpriError, InvalidInput
from approvals.models import Action, ActionStatus
from audit import log as audit
from audit.models import ActorType

from . import notices
from .models import EXCEPTIONS, Movement, ProcessorEvent, Settlement, State

PERMISSION = "ledger.reconcile"
# An action's kind that names one of these (and not "refund") moves money in: a charge.
CHARGE_WORDS = ("charge", "payment", "invoice", "capture")
# How far back the sweep looks for unmatched movements whose reference an agent reported later.
REMATCH_DAYS = 30


class MovementNotFound(ImpriError):
    status_code = 404
    code = "not_found"


@dataclass(frozen=True)
class Incoming:
    """A movement as a source reports it."""

    source: str
    external_id: str
    kind: str
    amount_minor: int
    currency: str
    occurred_at: datetime
    reference: str = ""
    metadata: dict | None = None
    processor_status: str = "succeeded"
    event_created: int = 0
    action_id: str = ""


def body_sha256(body: dict) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()


def expected_kind(action: Action) -> str:
    """A kind naming a refund moves money out; one naming a charge, payment or capture, in."""
    kind = action.kind.lower()
    if "refund" in kind:
        return Movement.Kind.REFUND
    return Movement.Kind.CHARGE if any(w in kind for w in CHARGE_WORDS) else Movement.Kind.REFUND


def _atomic():
    return _Atomic()


class _Atomic:
    """``transaction.atomic()`` with the audit batch, as the core's changes run."""

    def __enter__(self):
        self._tx = transaction.atomic()
        self._tx.__enter__()
        self._batch = audit.batch()
        self._batch.__enter__()

    def __exit__(self, *exc):
        try:
            self._batch.__exit__(*exc)
        finally:
            self._tx.__exit__(*exc)


def _system(event: str, *, action_id: str = "", data: dict, source: str = "processor"):
    audit.record(
        event,
        actor_type=ActorType.SYSTEM,
        actor_id=f"ledger:{source}",
        action_id=action_id,
        data=data,
    )


def _movement_data(movement: Movement) -> dict:
    return {
        "movement": movement.pk,
        "source": movement.source,
        "id": movement.external_id,
        "kind": movement.kind,
        "amount_minor": movement.amount_minor,
        "currency": movement.currency,
        "processor_status": movement.processor_status,
    }


# --- Recording --------------------------------------------------------------------------


def seen_event(source: str, event_id: str, type_: str) -> bool:
    """Record a processor event id; True when it was recorded before (a replay)."""
    try:
        with transaction.atomic():
            ProcessorEvent.objects.create(source=source, event_id=event_id, type=type_)
    except IntegrityError:
        return True
    return False


def record_movement(incoming: Incoming, *, idempotency_hash: str = "") -> tuple[Movement, bool]:
    """Record (or update) one movement and settle the states it touches; ``(movement, new)``.

    A movement is known by ``(source, external_id)``. An update older than the one that
    set the row (``event_created``) changes nothing: out-of-order events keep the latest.
    With ``idempotency_hash`` (the generic API), the same id with another body is a 409.
    """
    _check(incoming)
    with _atomic():
        existing = (
            Movement.objects.select_for_update()
            .filter(source=incoming.source, external_id=incoming.external_id)
            .first()
        )
        if existing is not None:
            if idempotency_hash:
                if existing.body_sha256 != idempotency_hash:
                    raise Conflict(
                        f"movement {incoming.external_id!r} was recorded with another body; "
                        "an id names one movement"
                    )
                return existing, False
            if incoming.event_created and incoming.event_created < existing.event_created:
                return existing, False
            before = existing.action
            _apply(existing, incoming)
            existing.save()
            _system(
                "ledger.movement_recorded",
                action_id=existing.action_id or "",
                data={**_movement_data(existing), "updated": True},
            )
            _settle_around(existing, before)
            existing.refresh_from_db()
            return existing, False
        movement = Movement(
            source=incoming.source,
            external_id=incoming.external_id,
            body_sha256=idempotency_hash,
            state=State.AWAITING,
        )
        _apply(movement, incoming)
        movement.save()
        _system(
            "ledger.movement_recorded",
            action_id=movement.action_id or "",
            data=_movement_data(movement),
        )
        _settle_around(movement, None)
        movement.refresh_from_db()
    return movement, True


def _check(incoming: Incoming) -> None:
    if not incoming.external_id or len(incoming.external_id) > 255:
        raise InvalidInput("id", "must be 1 to 255 characters")
    if incoming.kind not in Movement.Kind.values:
        raise InvalidInput("kind", "must be refund or charge")
    if not action_money.iso_currency(incoming.currency):
        raise InvalidInput("currency", f"{incoming.currency!r} is not an ISO 4217 code")
    if (
        isinstance(incoming.amount_minor, bool)
        or not isinstance(incoming.amount_minor, int)
        or not 0 < incoming.amount_minor <= 2**53 - 1
    ):
        raise InvalidInput("amount_minor", "must be a positive whole number of minor units")


def _apply(movement: Movement, incoming: Incoming) -> None:
    movement.kind = incoming.kind
    movement.amount_minor = incoming.amount_minor
    movement.currency = incoming.currency.upper()
    movement.occurred_at = incoming.occurred_at
    movement.reference = incoming.reference or movement.reference
    movement.metadata = incoming.metadata or movement.metadata or {}
    movement.processor_status = incoming.processor_status
    movement.event_created = max(incoming.event_created, movement.event_created or 0)
    action, how = _match(movement, incoming.action_id)
    movement.action = action
    movement.matched_by = how


def _match(movement: Movement, action_id: str = "") -> tuple[Action | None, str]:
    """``metadata.impri_action_id`` (or the API's ``action_id``), else the reference the
    agent reported (``result.reference``), else none."""
    named = action_id or str((movement.metadata or {}).get("impri_action_id") or "")
    if named:
        action = Action.objects.filter(pk=named).first()
        return action, "metadata" if action else ""
    ids = {movement.external_id, movement.reference} - {""}
    action = Action.objects.filter(result_reference__in=ids).order_by("created_at").first()
    return (action, "reference") if action else (None, "")


# --- States -----------------------------------------------------------------------------


def _settle_around(movement: Movement, before: Action | None) -> None:
    if before is not None and before.pk != movement.action_id:
        settle(before)
    if movement.action_id:
        settle(movement.action)
    else:
        _settle_unmatched(movement)


def _settle_unmatched(movement: Movement) -> None:
    """A movement no action claims: money moved without anyone's decision (unapproved),
    unless a reviewer explained it or it moved nothing (a failed refund: awaiting)."""
    if movement.explained_at:
        state = State.EXPLAINED
    elif not movement.counts:
        state = State.AWAITING
    else:
        state = State.UNAPPROVED
    previous = movement.state
    movement.state = state
    Movement.objects.filter(pk=movement.pk).update(state=state)
    if state != previous and state in EXCEPTIONS:
        _exception(None, movement, state, [movement])


def compute(action: Action, movements: list[Movement], now: datetime | None = None) -> str:
    """An action's state from its movements (see docs/reconciliation.md, "States")."""
    now = now or timezone.now()
    live = [m for m in movements if m.counts]
    if not action.was_approved:
        return State.UNAPPROVED if live else State.AWAITING
    if not live:
        settle_after = timedelta(hours=settings.IMPRI_LEDGER_SETTLE_H)
        if (
            action.status == ActionStatus.EXECUTED
            and action.reported_at is not None
            and action.reported_at + settle_after <= now
        ):
            return State.UNSETTLED
        return State.AWAITING
    approved = action_money.approved(action)
    kind = expected_kind(action)
    moved: dict[str, int] = defaultdict(int)
    for m in live:
        moved[m.currency] += m.amount_minor
    if approved is None or any(m.kind != kind for m in live) or set(moved) - set(approved):
        return State.MISMATCH
    if any(moved[c] > approved[c] for c in moved):
        return State.DUPLICATE if len(live) > 1 else State.MISMATCH
    if any(moved[c] != approved[c] for c in moved):
        return State.MISMATCH
    if action.status == ActionStatus.APPROVED or action.status == ActionStatus.FAILED:
        return State.UNREPORTED
    return State.MATCHED


def settle(action: Action, now: datetime | None = None) -> Settlement:
    """Compute ``action``'s state, store it on the action's settlement and its movements,
    and tell: ``ledger.matched`` when it becomes matched, ``ledger.exception`` (audited and
    noticed, once) when it becomes an exception."""
    action = Action.objects.select_related("agent").get(pk=action.pk)
    movements = list(Movement.objects.filter(action=action).order_by("occurred_at", "pk"))
    computed = compute(action, movements, now)
    settlement, _ = Settlement.objects.select_for_update().get_or_create(
        action=action, defaults={"state": State.AWAITING, "computed_state": State.AWAITING}
    )
    previous = settlement.state
    state = computed
    if settlement.explained_state and settlement.explained_state == computed:
        state = State.EXPLAINED
    elif settlement.explained_state:  # a later movement changed the picture: open again
        settlement.explained_state = ""
    settlement.computed_state = computed
    settlement.state = state
    settlement.updated_at = timezone.now()
    settlement.save()
    for movement in movements:
        Movement.objects.filter(pk=movement.pk).update(state=state)
        movement.state = state
    if state != previous:
        if state == State.MATCHED:
            _system(
                "ledger.matched",
                action_id=action.pk,
                data={
                    "movements": [m.pk for m in movements],
                    "approved": action_money.approved(action),
                    "moved": _moved(movements),
                },
            )
        elif state in EXCEPTIONS:
            _exception(action, None, state, movements)
    return settlement


def _moved(movements: list[Movement]) -> dict[str, int]:
    moved: dict[str, int] = defaultdict(int)
    for m in movements:
        if m.counts:
            moved[m.currency] += m.amount_minor
    return dict(moved)


def _exception(
    action: Action | None, movement: Movement | None, state: str, movements: list[Movement]
) -> None:
    data = {
        "state": state,
        "movements": [m.pk for m in movements],
        "approved": action_money.approved(action) if action else None,
        "moved": _moved(movements),
    }
    _system("ledger.exception", action_id=action.pk if action else "", data=data)
    subject = f"action:{action.pk}" if action else f"movement:{movement.pk}"
    notices.enqueue(subject, state, action, movements)


# --- A reviewer's explanation -----------------------------------------------------------


def can_reconcile(user) -> bool:
    return bool(user and user.is_active and user.has_perm(PERMISSION))


def explain(user, *, reason: str, action_id: str = "", movement_id: int | None = None):
    """A reviewer with ``ledger.reconcile`` marks an exception explained, with a reason."""
    if not can_reconcile(user):
        raise Forbidden("marking an exception explained needs the reconcile permission")
    reason = (reason or "").strip()
    if not reason:
        raise InvalidInput("reason", "must say why the difference is fine")
    if len(reason) > 2000:
        raise InvalidInput("reason", "must be at most 2000 characters")
    with _atomic():
        if action_id:
            settlement = Settlement.objects.select_for_update().filter(action_id=action_id).first()
            if settlement is None or settlement.state not in EXCEPTIONS:
                raise Conflict(f"action {action_id} has no open reconciliation exception")
            explained = settlement.state
            settlement.explained_state = explained
            settlement.explained_reason = reason
            settlement.explained_by = user
            settlement.explained_at = timezone.now()
            settlement.state = State.EXPLAINED
            settlement.save()
            Movement.objects.filter(action_id=action_id).update(state=State.EXPLAINED)
            subject_data = {"action": action_id}
        else:
            movement = Movement.objects.select_for_update().filter(pk=movement_id).first()
            if movement is None:
                raise MovementNotFound(f"no movement {movement_id}")
            if movement.action_id or movement.state not in EXCEPTIONS:
                raise Conflict(f"movement {movement_id} has no open exception of its own")
            explained = movement.state
            movement.explained_reason = reason
            movement.explained_by = user
            movement.explained_at = timezone.now()
            movement.state = State.EXPLAINED
            movement.save()
            subject_data = {**_movement_data(movement)}
        audit.record(
            "ledger.explained",
            actor_type=ActorType.REVIEWER,
            actor_id=user.get_username(),
            actor_ref=f"user:{user.pk}",
            action_id=action_id,
            data={**subject_data, "state": explained, "reason": reason},
        )


# --- The sweep --------------------------------------------------------------------------


def sweep(now: datetime | None = None) -> dict[str, int]:
    """What time and later reports change: executed actions past IMPRI_LEDGER_SETTLE_H with
    no movement become unsettled; unmatched movements whose id an agent reported since are
    matched; unreported actions whose agent reported since are settled again."""
    now = now or timezone.now()
    counts = {"unsettled": 0, "rematched": 0, "resettled": 0}
    due = now - timedelta(hours=settings.IMPRI_LEDGER_SETTLE_H)
    candidates = (
        Action.objects.filter(status=ActionStatus.EXECUTED, reported_at__lte=due)
        .exclude(settlement__state__in=[State.UNSETTLED, State.EXPLAINED])
        .exclude(movements__isnull=False)
        .exclude(money__isnull=True)
        .filter(reported_at__gte=due - timedelta(days=REMATCH_DAYS))
        .only("pk")[:500]
    )
    for action in list(candidates):
        with _atomic():
            if settle(action, now).state == State.UNSETTLED:
                counts["unsettled"] += 1
    unmatched = Movement.objects.filter(
        action__isnull=True, recorded_at__gte=now - timedelta(days=REMATCH_DAYS)
    ).exclude(state=State.EXPLAINED)
    references = set(unmatched.values_list("external_id", flat=True)) | set(
        unmatched.exclude(reference="").values_list("reference", flat=True)
    )
    if references and Action.objects.filter(result_reference__in=references).exists():
        for movement in unmatched:
            action, how = _match(movement)
            if action is not None:
                with _atomic():
                    Movement.objects.filter(pk=movement.pk).update(action=action, matched_by=how)
                    settle(action, now)
                    counts["rematched"] += 1
    stale = Settlement.objects.filter(state=State.UNREPORTED).exclude(
        action__status=ActionStatus.APPROVED
    )
    for settlement in stale.select_related("action")[:500]:
        with _atomic():
            settle(settlement.action, now)
            counts["resettled"] += 1
    return counts
