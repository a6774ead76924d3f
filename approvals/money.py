"""Money in an action: the one function every money guard reads (``amounts``).

Step-up, the Slack ceiling, the default edit bounds, budgets, the dashboard's
volumes, the inbox's money line and its "words and payload disagree" banner
all read an action's amounts here, and so see the same figure for the same
action. The reading itself is pure and lives in ``rules.money`` (the rules
need it too); this module ties it to an ``Action``: the declaration fixed at
push (``Action.money``), or the detector for a kind that declares nothing.

The closed world (issue 39): what the guards hold (``held``) is the declared
amounts, totalled per currency by ``rules.money``; a kind that declares no money
moves an unknown amount (``rules.money.unknown_amount``), over every threshold,
unless ``IMPRI_UNDECLARED_KINDS=detect``. What the detector finds in such a
payload is still shown (``amounts``), marked not declared.
"""

from __future__ import annotations

from django.conf import settings

from rules.money import (
    ISO_4217,
    MINOR_UNITS,
    SYMBOLS,
    Amount,
    Money,
    MoneySpec,
    above,
    at_or_above,
    expand,
    iso_currency,
    largest,
    minor_units,
    shown,
    totals,
    unknown_amount,
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
    "approved",
    "at_or_above",
    "guarded",
    "held",
    "is_closed",
    "iso_currency",
    "largest",
    "minor_units",
    "money_paths",
    "primary",
    "primary_path",
    "shown",
    "specs_of",
    "totals",
]


def specs_of(action) -> list[MoneySpec] | None:
    """The action's money declaration as fixed at push; None: undeclared (the detector reads it)."""
    if action.money is None:
        return None
    return [MoneySpec.from_dict(item) for item in action.money]


def spec_at(action, path: str) -> MoneySpec | None:
    """The declaration that names ``path`` (``payload.lines.1.amount`` is named by
    ``payload.lines.*.amount``); None for an undeclared kind or a path no entry names."""
    document = {"payload": action.payload}
    for spec in specs_of(action) or []:
        if any(found == path for found, _ in expand(document, spec)):
            return spec
    return None


def amounts(action, payload: dict | None = None) -> list[Amount]:
    """The action's amounts in ``payload`` (default: its current payload), as shown: the
    declared ones, or for an undeclared kind what the detector finds (``declared`` False)."""
    document = {"payload": action.payload if payload is None else payload}
    return read_amounts(document, specs_of(action))


def is_closed(action) -> bool:
    """True when the action's kind declares no money and the world is closed (the default)."""
    return action.money is None and settings.IMPRI_UNDECLARED_KINDS != "detect"


def held(action, payload: dict | None = None) -> list[Amount]:
    """The amounts every guard holds (step-up, the Slack ceiling, the amount columns): the
    declared ones; for an undeclared kind one unknown amount, over every threshold
    (``IMPRI_UNDECLARED_KINDS=detect``: the detector's)."""
    if is_closed(action):
        return [unknown_amount(action.kind)]
    return amounts(action, payload)


def guarded(action, payload: dict | None = None) -> Amount | None:
    """The amount thresholds are held against: an unreadable one first, else the largest total."""
    return largest(held(action, payload))


def _primary(action, payload: dict | None) -> Amount | None:
    found = amounts(action, payload)
    readable = [a for a in found if a.minor is not None]
    if not readable:
        return found[0] if found else None
    if action.money is None:
        return max(readable, key=lambda a: abs(a.minor or 0))
    # Several amounts in the first one's currency are shown as what they add up to.
    same = [a for a in readable if a.currency == readable[0].currency]
    return totals(same)[0] if len(same) > 1 else readable[0]


def primary(action, payload: dict | None = None) -> Money | None:
    """The action's amount as money, for display: the first declared one (the total of all in
    its currency, when there are several), else the largest found.

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
    keep them (the largest total of a currency; none for an undeclared kind, whose amount is
    unknown); ``found``: its amounts, when the caller has read them already."""
    if is_closed(action):
        return None, ""
    top = largest(found if found is not None else amounts(action, payload))
    if top is None or top.minor is None:
        return None, ""
    return top.minor, top.currency


def approved(action) -> dict[str, int] | None:
    """What an approved action may move, per currency (magnitudes in minor units): its
    declared amounts in the approved payload, totalled per currency. None when the kind
    declares no money or an amount can't be read (reconciliation can't hold it to a figure)."""
    if action.money is None:
        return None
    found = amounts(action)
    if any(a.minor is None for a in found):
        return None
    return {total.currency: abs(total.minor or 0) for total in totals(found)}
