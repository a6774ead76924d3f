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

    An action pushed before bounds were fixed per path gets the money default.
    """
    bounds = action.edit_bounds or {}
    if path in bounds:
        return bounds[path] or {}
    paths = money.money_paths(action, action.original_payload)
    return effective_bounds([path], action.original_payload, {}, {}, paths)[path]
