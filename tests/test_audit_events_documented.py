"""The audit event table in docs/audit.md and the events the code appends are the same set."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
APP_DIRS = ("impri", "approvals", "audit", "rules", "inbox", "gateway")


def documented() -> set[str]:
    events = set()
    for line in (ROOT / "docs/audit.md").read_text().splitlines():
        if line.startswith("| `"):
            first_cell = line.split("|")[1]
            events |= set(re.findall(r"`([a-z_]+\.[a-z_.]+)`", first_cell))
    return events


def emitted() -> tuple[set[str], set[str]]:
    """Event names passed to ``record(...)``: literal names, and f-string names as patterns."""
    names, patterns = set(), set()
    for folder in APP_DIRS:
        for path in (ROOT / folder).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if not (isinstance(node, ast.Call) and node.args):
                    continue
                func = node.func
                name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                if name != "record":
                    continue
                first = node.args[0]
                if isinstance(first, ast.Constant) and isinstance(first.value, str):
                    names.add(first.value)
                elif isinstance(first, ast.JoinedStr):
                    patterns.add(
                        "".join(
                            re.escape(part.value) if isinstance(part, ast.Constant) else "[a-z_]+"
                            for part in first.values
                        )
                    )
    return names, patterns


def test_the_scan_finds_literal_and_computed_event_names():
    names, patterns = emitted()
    assert {"action.pushed", "result.reported", "reviewer.login"} <= names
    assert r"action\.[a-z_]+" in patterns


def test_every_event_the_code_appends_is_documented():
    names, _ = emitted()
    assert sorted(names - documented()) == []


def test_every_documented_event_is_appended_somewhere():
    names, patterns = emitted()
    orphans = {
        event
        for event in documented() - names
        if not any(re.fullmatch(pattern, event) for pattern in patterns)
    }
    assert sorted(orphans) == []
