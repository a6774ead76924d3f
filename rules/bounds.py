"""Edit bounds: the ``{min, max}`` a reviewer's edit must keep to, and the check.

Pure, like the engine: the money default, a rule's ``edit_bounds``, the agent's
narrowing (fixed per path at push), and why a value breaks them.
"""

from __future__ import annotations

from typing import Any

from .engine import is_number, lookup

DEFAULT_MONEY_BOUNDS = {"min": 1, "max": "original"}


def is_money_field(path: str, original: Any) -> bool:
    """A money field: an integer (minor units, e.g. cents) whose name ends in ``_cents``."""
    return (
        path.rsplit(".", 1)[-1].endswith("_cents")
        and isinstance(original, int)
        and not isinstance(original, bool)
    )


def effective_bounds(
    editable: list[str], original: dict, rule_bounds: dict, push_bounds: dict
) -> dict:
    """The ``{min, max}`` a reviewer's edit must keep to, per editable path.

    1. A money field whose original is above 0 starts at ``0 < value <= original``
       (``{min: 1, max: original}``); any other field starts unbounded.
    2. The rule's ``edit_bounds`` replace those limits key by key (a ``null``
       removes one): rules may widen or narrow.
    3. The agent's own ``{min, max}`` from ``editable`` can only narrow: the
       tighter of the two limits wins.
    """
    out = {}
    for path in editable:
        value = lookup({"payload": original}, path)
        limits = dict(DEFAULT_MONEY_BOUNDS) if is_money_field(path, value) and value > 0 else {}
        limits.update(rule_bounds.get(path) or {})
        for key, limit in (push_bounds.get(path) or {}).items():
            limits[key] = _tighter(key, limits.get(key), limit, value)
        # Every editable path is listed, {} when unbounded, so a rule's null is kept as meant.
        out[path] = {key: limit for key, limit in limits.items() if limit is not None}
    return out


def _tighter(key: str, current: Any, proposed: Any, original: Any) -> Any:
    if current is None:
        return proposed
    a, b = (original if x == "original" else x for x in (current, proposed))
    if not (is_number(a) and is_number(b)):
        return current
    if key == "min":
        return proposed if b > a else current
    return proposed if b < a else current


def bound_problem(bounds: dict, original: Any, value: Any) -> str | None:
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
