"""No module over 500 lines in application code, the client or the examples (tests and migrations aside)."""

from __future__ import annotations

from pathlib import Path

from tests.source import ROOT, application_modules, application_trees

MAX_LINES = 500


def line_count(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def test_the_trees_are_found():
    names = {path.relative_to(ROOT).as_posix() for path in application_modules()}
    # The scan reaches every tree it claims to, so an empty glob can't pass it.
    for expected in (
        "approvals/models.py",
        "approvals/services/deciding.py",
        "impri/settings.py",
        "clients/python/src/impri_client/client.py",
        "examples/refund_agent/__main__.py",
    ):
        assert expected in names
    assert not any("/migrations/" in name for name in names)
    # A new app is scanned without anyone remembering to list it.
    assert {"approvals", "gateway", "impri", "slackapp"} <= set(application_trees())


def test_no_module_is_over_500_lines():
    over = {
        path.relative_to(ROOT).as_posix(): n
        for path in application_modules()
        if (n := line_count(path)) > MAX_LINES
    }
    assert not over, f"modules over {MAX_LINES} lines (split them along a real seam): " + ", ".join(
        f"{name} ({n})" for name, n in sorted(over.items())
    )
