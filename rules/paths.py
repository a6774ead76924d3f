"""One spelling per path: a dotted path's list indices are ASCII digits without a leading zero.

``payload.lines.0.amount_cents`` is the only way to name the first line's amount:
``00``, a fullwidth ``０``, ``+0``, ``0_0`` or `` 0`` (which Python's ``int`` and
``str.isdigit`` all read as 0) are refused wherever a path is given (``editable``,
an edit's key, a rule's ``edit_bounds``, a ``money:`` declaration), so a bound or a
declaration keyed by one spelling can't be walked around by another. Pure.
"""

from __future__ import annotations

import re

CANONICAL_INDEX = re.compile(r"0|[1-9][0-9]*")
WILDCARD = "*"  # a declaration's "every element of this list": payload.lines.*.amount_cents


def looks_like_index(segment: str) -> bool:
    """True for a segment that some reader could take for a list index."""
    if segment.isdigit() or segment.isdecimal() or segment.isnumeric():
        return True
    try:
        int(segment)
    except ValueError:
        return False
    return True


def segment_problem(segment: str) -> str | None:
    if looks_like_index(segment) and not CANONICAL_INDEX.fullmatch(segment):
        return (
            f"list index {segment!r} must be written in ASCII digits without a leading zero "
            "or sign (e.g. 0, 12)"
        )
    return None


def path_problem(path: str, *, wildcard: bool = False) -> str | None:
    """Why ``path`` is not in its one spelling, or None. ``wildcard``: ``*`` may stand for an index."""
    for segment in path.split("."):
        if wildcard and segment == WILDCARD:
            continue
        problem = segment_problem(segment)
        if problem:
            return problem
    return None


def index_of(segment: str) -> int | None:
    """The list index ``segment`` names in its one spelling, else None."""
    return int(segment) if CANONICAL_INDEX.fullmatch(segment) else None
