"""Reads: an action's reconciliation, the exceptions list, the dashboard's figures."""

from __future__ import annotations

from collections import defaultdict

from django.db.models import Count, Prefetch, Q, QuerySet, Sum

from approvals.money import approved
from approvals.presenters import unix

from .models import EXCEPTIONS, Movement, Settlement, State


def movement_out(movement: Movement) -> dict:
    return {
        "id": movement.external_id,
        "source": movement.source,
        "kind": movement.kind,
        "amount_minor": movement.amount_minor,
        "currency": movement.currency,
        "occurred_at": unix(movement.occurred_at),
        "state": movement.state,
    }


def reconciliation_out(action) -> dict | None:
    """The ``reconciliation`` object of an action's read; None while nothing is known.

    Every action a movement matched has a settlement (``services.settle`` writes it), so an
    action without one costs this read one statement.
    """
    settlement = settlement_of(action.pk)
    if settlement is None:
        return None
    return {
        "state": settlement.state,
        "movements": [movement_out(m) for m in movements_of(action.pk)],
    }


def settlement_of(action_id: str) -> Settlement | None:
    return Settlement.objects.filter(action_id=action_id).first()


def movements_of(action_id: str) -> QuerySet[Movement]:
    """An action's movements, in the order they happened."""
    return Movement.objects.filter(action_id=action_id).order_by("occurred_at", "pk")


def movements(state: str = "") -> QuerySet[Movement]:
    found = Movement.objects.select_related("action", "explained_by")
    return found.filter(state=state) if state else found


def exceptions(state: str = "", source: str = "", currency: str = "") -> list[dict]:
    """Open exceptions, newest first: approved actions in an exception state, and movements
    no action claims (unapproved). Each row: state, action, movements, approved, moved."""
    states = [state] if state else list(EXCEPTIONS)
    rows = []
    settlements = (
        Settlement.objects.filter(state__in=states)
        .select_related("action__agent")
        .prefetch_related(
            Prefetch("action__movements", queryset=Movement.objects.order_by("occurred_at", "pk"))
        )
        .order_by("-updated_at")[:500]
    )
    for settlement in settlements:
        moved = list(settlement.action.movements.all())  # prefetched: one query for all
        if source and not any(m.source == source for m in moved):
            continue
        if currency and not any(m.currency == currency for m in moved):
            continue
        rows.append(
            {
                "state": settlement.state,
                "action": settlement.action,
                "movements": moved,
                "approved": approved(settlement.action) or {},
                "since": settlement.updated_at,
                "movement": None,
            }
        )
    if State.UNAPPROVED in states:
        lone = Movement.objects.filter(action__isnull=True, state=State.UNAPPROVED)
        if source:
            lone = lone.filter(source=source)
        if currency:
            lone = lone.filter(currency=currency)
        for movement in lone.order_by("-recorded_at")[:500]:
            rows.append(
                {
                    "state": movement.state,
                    "action": None,
                    "movements": [movement],
                    "approved": {},
                    "since": movement.recorded_at,
                    "movement": movement,
                }
            )
    rows.sort(key=lambda row: row["since"], reverse=True)
    return rows


def summary() -> dict:
    """The dashboard's panel: matched %, exceptions by state, money in exceptions per currency.

    Two statements whatever the data: movements grouped by state, currency and whether an
    action claims them, and settlements in an exception state grouped by state.
    """
    by_state: dict[str, int] = defaultdict(int)
    counts = {state: 0 for state in EXCEPTIONS}
    money: dict[str, int] = defaultdict(int)
    rows = (
        Movement.objects.order_by()
        .values_list("state", "currency", Q(action__isnull=True))
        .annotate(n=Count("pk"), total=Sum("amount_minor"))
    )
    for state, currency, lone, n, total in rows:
        by_state[state] += n
        if state in EXCEPTIONS:
            money[currency] += total or 0
            if lone and state == State.UNAPPROVED:
                counts[State.UNAPPROVED] += n
    for state, n in (
        Settlement.objects.filter(state__in=EXCEPTIONS)
        .order_by()
        .values_list("state")
        .annotate(n=Count("pk"))
        .values_list("state", "n")
    ):
        counts[state] += n
    total = sum(n for s, n in by_state.items() if s != State.AWAITING)
    matched = by_state.get(State.MATCHED, 0)
    return {
        "movements": total,
        "matched_percent": round(100 * matched / total, 1) if total else None,
        "exceptions": counts,
        "money": dict(sorted(money.items())),
    }
