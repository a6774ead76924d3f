"""The apps depend on each other one way only, proven by scanning every import.

``approvals`` is the core: the inbox, the gateway and the admin pages build on it,
and it builds on ``rules`` (the pure engine) and ``audit``. An arrow the other way
(the core importing the UI, the rule engine importing the actions it judges) is a
cycle in the making; this scan fails on the first one, lazy imports included.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# app -> the apps it must never import (at module level or inside a function).
FORBIDDEN = {
    "rules": {"approvals", "inbox", "gateway"},
    "approvals": {"inbox", "gateway"},
    "audit": {"approvals", "rules", "inbox", "gateway"},
}


def imported_packages(path: Path) -> set[tuple[str, int]]:
    """The top-level package of every absolute import in ``path``, with its line."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {(alias.name.split(".")[0], node.lineno) for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add((node.module.split(".")[0], node.lineno))
    return found


def violations(app: str, forbidden: set[str]) -> list[str]:
    return sorted(
        f"{path.relative_to(ROOT)}:{line} imports {package}"
        for path in (ROOT / app).rglob("*.py")
        for package, line in imported_packages(path)
        if package in forbidden
    )


@pytest.mark.parametrize("app", sorted(FORBIDDEN))
def test_an_app_never_imports_the_apps_above_it(app):
    assert violations(app, FORBIDDEN[app]) == []


def test_the_scan_sees_imports_at_module_level_and_inside_functions(tmp_path):
    # The scan itself must be able to fail: the inbox does build on approvals.
    assert violations("inbox", {"approvals"})
    sample = tmp_path / "sample.py"
    sample.write_text("import os\n\ndef later():\n    from approvals.models import Action\n")
    assert ("approvals", 4) in imported_packages(sample)


def test_the_project_commands_live_in_the_project_app():
    from django.core.management import get_commands

    commands = get_commands()
    for name in ("serve", "worker", "beat", "mcp", "waitdb", "backup"):
        assert commands[name] == "impri", name
        assert not (ROOT / "approvals/management/commands" / f"{name}.py").exists()
