"""The audit event table in docs/audit.md and the events the code appends are the same set."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.source import application_trees

ROOT = Path(__file__).resolve().parent.parent
APP_DIRS = tuple(name for name in application_trees() if name not in ("clients", "examples"))


def documented() -> set[str]:
    events = set()
    for line in (ROOT / "docs/audit.md").read_text().splitlines():
        if line.startswith("| `"):
            first_cell = line.split("|")[1]
            events |= set(re.findall(r"`([a-z_]+\.[a-z_.]+)`", first_cell))
    return events


def _sources():
    for folder in APP_DIRS:
        for path in (ROOT / folder).rglob("*.py"):
            if "migrations" not in path.parts:
                yield ast.parse(path.read_text())


def _names_in(node) -> tuple[set[str], set[str]]:
    """Literal names and f-string patterns an event-name argument can take."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}, set()
    if isinstance(node, ast.IfExp):
        a_names, a_patterns = _names_in(node.body)
        b_names, b_patterns = _names_in(node.orelse)
        return a_names | b_names, a_patterns | b_patterns
    if isinstance(node, ast.JoinedStr):
        pattern = "".join(
            re.escape(part.value) if isinstance(part, ast.Constant) else "[a-z_]+"
            for part in node.values
        )
        return set(), {pattern}
    return set(), set()


def emitted() -> tuple[set[str], set[str]]:
    """Event names passed to ``record(...)`` (or a module's ``_record``): literal names, and
    f-string names as patterns."""
    names, patterns = set(), set()
    for tree in _sources():
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and node.args):
                continue
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in ("record", "_record"):
                found, found_patterns = _names_in(node.args[0])
                names |= found
                patterns |= found_patterns
    return names, patterns


def literals() -> set[str]:
    """Every string literal in application code."""
    return {
        node.value
        for tree in _sources()
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    }


def test_the_scan_finds_literal_and_computed_event_names():
    names, patterns = emitted()
    assert {"action.pushed", "result.reported", "reviewer.login"} <= names
    assert r"action\.[a-z_]+" in patterns


def test_every_event_the_code_appends_is_documented():
    names, _ = emitted()
    assert sorted(names - documented()) == []


def test_every_documented_event_is_in_the_code():
    # Names can travel through tables and helpers before they reach record(), so this
    # direction asks only that each documented name is written somewhere in the code.
    _, patterns = emitted()
    code = literals()
    orphans = {
        event
        for event in documented() - code
        if not any(re.fullmatch(pattern, event) for pattern in patterns)
    }
    assert sorted(orphans) == []
