"""No module over 500 lines in application code, the client or the examples (tests and migrations aside)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TREES = ("approvals", "audit", "rules", "inbox", "gateway", "impri", "clients", "examples")
SKIPPED_DIRS = {"migrations", "tests", "build", "dist", "__pycache__", "node_modules"}
MAX_LINES = 500


def modules() -> list[Path]:
    found = []
    for tree in TREES:
        for path in sorted((ROOT / tree).rglob("*.py")):
            parts = path.relative_to(ROOT).parts[:-1]
            if any(part in SKIPPED_DIRS or part.endswith(".egg-info") for part in parts):
                continue
            found.append(path)
    return found


def line_count(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def test_the_trees_are_found():
    names = {path.relative_to(ROOT).as_posix() for path in modules()}
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


def test_no_module_is_over_500_lines():
    over = {
        path.relative_to(ROOT).as_posix(): n
        for path in modules()
        if (n := line_count(path)) > MAX_LINES
    }
    assert not over, f"modules over {MAX_LINES} lines (split them along a real seam): " + ", ".join(
        f"{name} ({n})" for name, n in sorted(over.items())
    )
