"""Money in an action: the one function every money guard reads (``amounts``).

Step-up, the Slack ceiling, the default edit bounds, budgets, the dashboard's
volumes, the inbox's money line and its "words and payload disagree" banner
all read an action's amounts here, and so see the same figure for the same
action. The reading itself is pure and lives in ``rules.money`` (the rules
need it too); this module ties it to an ``Action``: the declaration fixed at
push (``Action.money``), or the detector for a kind that declares nothing.
"""

from __future__ import annotations

from rules.money import (
    ISO_4217,
    MINOR_UNITS,
    SYMBOLS,
    Amount,
    Money,
    MoneySpec,
    above,
    at_or_above,
    iso_currency,
    largest,
    minor_units,
    shown,
)
from rules.money import amounts as read_amounts

__all__ = [
    "ISO_4217",
    "MINOR_UNITS",
    "SYMBOLS",
    "Amount",
    "Money",
    "MoneySpec",
    "above",
    "amounts",
    "at_or_above",
    "guarded",
    "iso_currency",
    "largest",
    "minor_units",
    "money_paths",
    "primary",
    "primary_path",
    "shown",
    "specs_of",
]


def specs_of(action) -> list[MoneySpec] | None:
    """The action's money declaration as fixed at push; None: undeclared (the detector reads it)."""
    if action.money is None:
        return None
    return [MoneySpec.from_dict(item) for item in action.money]


def amounts(action, payload: dict | None = None) -> list[Amount]:
    """The action's amounts in ``payload`` (default: its current payload)."""
    document = {"payload": action.payload if payload is None else payload}
    return read_amounts(document, specs_of(action))


def guarded(action, payload: dict | None = None) -> Amount | None:
    """The amount thresholds are held against: an unreadable one first, else the largest."""
    return largest(amounts(action, payload))


def _primary(action, payload: dict | None) -> Amount | None:
    found = amounts(action, payload)
    readable = [a for a in found if a.minor is not None]
    if readable:
        return (
            readable[0] if action.money is not None else max(readable, key=lambda a: abs(a.minor))
        )
    return found[0] if found else None


def primary(action, payload: dict | None = None) -> Money | None:
    """The action's amount as money, for display: the first declared one, else the largest found.

    An amount the guards can't read (and so hold over every limit) is still
    shown as well as it reads (``8400.5`` → ``$84.005 USD``), beside a warning.
    """
    amount = _primary(action, payload)
    if amount is None:
        return None
    if amount.minor is not None:
        return amount.money
    loose = minor_units(amount.raw)
    return Money(loose, amount.currency) if loose is not None else None


def primary_path(action) -> str:
    """Where ``primary`` reads the amount (``payload.amount_cents``), "" when there is none."""
    amount = _primary(action, None)
    return amount.path if amount is not None else ""


def money_paths(
    action, payload: dict | None = None, found: list[Amount] | None = None
) -> dict[str, str]:
    """The paths of the action's amounts, each with its sign (what default edit bounds follow)."""
    return {a.path: a.sign for a in (found if found is not None else amounts(action, payload))}


def stored_amount(
    action, payload: dict | None = None, found: list[Amount] | None = None
) -> tuple[int | None, str]:
    """``(amount_minor, amount_currency)`` of ``payload`` (default: the action's), as its columns
    keep them; ``found``: its amounts, when the caller has read them already."""
    top = largest(found if found is not None else amounts(action, payload))
    if top is None or top.minor is None:
        return None, ""
    return top.minor, top.currency
