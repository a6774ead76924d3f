"""The pure edit checks: editable paths, same JSON type, bounds; the edited payload."""

from __future__ import annotations

import copy
import math

from rules.bounds import bound_problem
from rules.detector import may_be_currency
from rules.money import currency_paths, ijson_problem, money_problems
from rules.paths import path_problem

from .. import money
from ..bounds import edit_bounds
from ..errors import InvalidInput
from ..models import Action
from ..schemas import resolve_path


def apply_edits(action: Action, edits: dict) -> dict:
    """Return the current payload with ``edits`` applied.

    Only a path listed in ``editable`` may change, to a value of the same JSON
    type, within its bounds (``edit_bounds``: the money default, the rule's, the
    agent's narrowing; ``original`` meaning the figure the agent pushed). Anything else is refused with a 422 naming ``edits.<path>``.
    """
    document = {"payload": copy.deepcopy(action.payload)}
    for path, value in edits.items():
        field = f"edits.{path}"
        spelling = path_problem(path)
        if spelling:  # one spelling per path: "00", "０", "+0" would escape the bounds of "0"
            raise InvalidInput(field, spelling)
        if path not in action.editable:
            allowed = ", ".join(action.editable) or "none"
            raise InvalidInput(
                field, f"{path} is not editable on this action (editable: {allowed})"
            )
        if _is_currency(action, path):  # listed by an action pushed before the check at push
            raise InvalidInput(field, f"{path} is the action's currency, which never changes")
        _, original = resolve_path({"payload": action.original_payload}, path)
        if isinstance(value, float) and not math.isfinite(value):
            raise InvalidInput(field, "must be a finite number")
        if not _same_json_type(original, value):
            raise InvalidInput(field, f"must be a {_json_type(original)} like the original value")
        problem = bound_problem(edit_bounds(action, path), original, value)
        if problem:
            raise InvalidInput(field, problem)
        problem = ijson_problem(value, field)
        if problem:
            raise InvalidInput(field, problem.partition(": ")[2])
        parent_path, _, leaf = path.rpartition(".")
        _, parent = resolve_path(document, parent_path)
        if isinstance(parent, list):
            parent[int(leaf)] = value
        else:
            parent[leaf] = value
    if edits:
        _check_declared(action, document)
    return document["payload"]


def _is_currency(action: Action, path: str) -> bool:
    """A path the action's currency is read from (an action pushed before the check at push)."""
    specs = money.specs_of(action)
    if specs is None:
        _, original = resolve_path({"payload": action.original_payload}, path)
        return may_be_currency(path.rpartition(".")[2], original)
    return path in currency_paths({"payload": action.original_payload}, specs)


def _check_declared(action: Action, document: dict) -> None:
    """An edited payload keeps the money its kind declared at push, as a push must."""
    specs = money.specs_of(action)
    for path, problem in money_problems(document, specs or []):
        raise InvalidInput(f"edits.{path}", problem)


def _json_type(value) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    return "string"


def _same_json_type(original, value) -> bool:
    kind = _json_type(original)
    if kind == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if isinstance(value, dict | list) or value is None:
        return False
    return _json_type(value) == kind
