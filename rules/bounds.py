"""Edit bounds: the ``{min, max}`` a reviewer's edit must keep to, and the check.

Pure, like the engine: the money default, a rule's ``edit_bounds``, the agent's
narrowing (fixed per path at push), and why a value breaks them.
"""

from __future__ import annotations

from typing import Any

from .engine import is_number, lookup
from .money import decimal_of

DEFAULT_MONEY_BOUNDS = {"min": 1, "max": "original"}


def money_default(original: Any, sign: str = "positive") -> dict[str, Any]:
    """The bounds a money field starts with: toward zero from what the agent asked, never past it.

    ``0 < value <= original`` for a positive amount; for a kind that declares
    ``sign: any``, a negative amount may likewise shrink toward zero
    (``original <= value < 0``). An amount that is not a number gets the
    positive default, which no edit passes (``bound_problem`` wants a number).
    """
    if sign == "any" and is_number(original) and original < 0:
        return {"min": "original", "max": -1}
    return dict(DEFAULT_MONEY_BOUNDS)


def effective_bounds(
    editable: list[str],
    original: dict[str, Any],
    rule_bounds: dict[str, Any],
    push_bounds: dict[str, Any],
    money_paths: dict[str, str] | None = None,
    *,
    closed: bool = False,
) -> dict[str, Any]:
    """The ``{min, max}`` a reviewer's edit must keep to, per editable path.

    1. A money field (``money_paths``: path → sign, the action's amounts as
       ``approvals.money`` reads them) starts at ``money_default``; any other
       field starts unbounded.
    2. The rule's ``edit_bounds`` replace those limits key by key (a ``null``
       removes one): rules may widen or narrow.
    3. The agent's own ``{min, max}`` from ``editable`` can only narrow: the
       tighter of the two limits wins.
    4. ``closed``: the kind declares no money (the closed world), so any number may be
       money: whatever the rule says, no number may move away from zero (``0 <= value
       <= original``, or ``original <= value <= 0``), and text holding any digit may not change.
    """
    money_paths = money_paths or {}
    out = {}
    for path in editable:
        value = lookup({"payload": original}, path)
        limits = money_default(value, money_paths[path]) if path in money_paths else {}
        limits.update(rule_bounds.get(path) or {})
        for key, limit in (push_bounds.get(path) or {}).items():
            limits[key] = _tighter(key, limits.get(key), limit, value)
        if closed:
            for key, limit in _closed(value).items():
                limits[key] = _tighter(key, limits.get(key), limit, value)
        # Every editable path is listed, {} when unbounded, so a rule's null is kept as meant.
        out[path] = {key: limit for key, limit in limits.items() if limit is not None}
    return out


def _closed(original: Any) -> dict[str, Any]:
    """The bounds a field of an undeclared kind keeps to: never further from zero."""
    if is_number(original):
        return {"min": 0, "max": "original"} if original >= 0 else {"min": "original", "max": 0}
    if isinstance(original, str) and _may_be_amount(original):
        return {"max": "original"}  # text is no number: bound_problem refuses every change
    return {}


def _may_be_amount(text: str) -> bool:
    """Text that could hold a figure in any script or format ("$15.00", "EUR 15", "١٥٠٠",
    "1 500,00"): any digit at all. Text the detector can't read is frozen all the same."""
    return decimal_of(text, text=True) is not None or any(
        ch.isdigit() or ch.isnumeric() for ch in text
    )


def _tighter(key: str, current: Any, proposed: Any, original: Any) -> Any:
    if current is None:
        return proposed
    a, b = (original if x == "original" else x for x in (current, proposed))
    if not (is_number(a) and is_number(b)):
        return current
    if key == "min":
        return proposed if b > a else current
    return proposed if b < a else current


def bound_problem(bounds: dict[str, Any], original: Any, value: Any) -> str | None:
    """Why ``value`` breaks ``bounds`` (``min``/``max``, a number or ``original``), or None."""
    if not bounds:
        return None
    if not is_number(value):
        return "must be a number within its bounds"
    limits = {key: (original if limit == "original" else limit) for key, limit in bounds.items()}
    low, high = limits.get("min"), limits.get("max")
    if low is not None and is_number(low) and value < low:
        return f"must be at least {low}" + (
            " (the original)" if bounds.get("min") == "original" else ""
        )
    if high is not None and is_number(high) and value > high:
        return f"must be at most {high}" + (
            " (the amount the agent asked for)" if bounds.get("max") == "original" else ""
        )
    return None
