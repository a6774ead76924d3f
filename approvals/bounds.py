"""An action's edit bounds: ``rules.bounds`` tied to an ``Action`` (pure: reads the row, writes nothing).

Read by the edit check (``services.edits``), the presenters (the bounds an agent and a
reviewer are shown) and the inbox's form; kept out of ``services`` so readers
need not import the door to know what an edit may do.
"""

from __future__ import annotations

from rules.bounds import effective_bounds

from . import money
from .models import Action


def edit_bounds(action: Action, path: str) -> dict:
    """The bounds an edit of ``path`` must keep to (fixed at push; see rules.bounds.effective_bounds).

    An action pushed before bounds were fixed per path gets the money default; one of a
    kind that declares no money is held to the closed world's bounds whenever it was pushed.
    """
    bounds = action.edit_bounds or {}
    closed = money.is_closed(action)
    original = action.original_payload
    if path in bounds:
        if not closed:
            return bounds[path] or {}
        return effective_bounds([path], original, {path: bounds[path] or {}}, {}, closed=True)[path]
    paths = money.money_paths(action, original)
    return effective_bounds([path], original, {}, {}, paths, closed=closed)[path]
