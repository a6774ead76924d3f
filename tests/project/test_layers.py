"""The house's floors: every import points down a floor, or across one without a circle.

Each package (or part of one, by module prefix) stands on a floor, listed
from the ground up in ``FLOORS``. The scan reads every import of every module
(at module level or inside a function, absolute or relative) and fails on one
that points up a floor, on one of the ``NEVER`` pairs, and on any circle
between parts. ``docs/house.json`` draws the same house; the last test holds
the drawing and this table together.
"""

from __future__ import annotations

import ast
import json
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# From the ground up. A part is a package or a module prefix; the longest prefix wins.
FLOORS: list[tuple[str, list[str]]] = [
    ("compat", ["compat"]),  # third-party private APIs, one module per upstream
    ("plumbing", ["plumbing"]),  # what every app shares: metrics, middleware base, Celery app…
    ("audit", ["audit"]),  # the hash-chained trail
    ("rules", ["rules"]),  # rule sets, kinds and money, budgets: pure engine
    ("core", ["approvals"]),  # actions: models, the one door (services), grants, presenters
    ("beside the core", ["delivery", "identity", "twofactor"]),  # outbox senders, credentials
    (
        "adapters",
        [
            "approvals.api",
            "approvals.mcp",
            "approvals.admin",
            "approvals.management",
            "inbox",
            "gateway",
            "slackapp",
            "webpush",
        ],
    ),
    ("roof", ["impri"]),  # settings, urls, asgi wiring, the commands that start processes
]

# Pairs of parts that must never import one another in that direction, even on one floor.
NEVER = {
    ("slackapp", "inbox"): "adapters don't call each other",
    ("webpush", "inbox"): "adapters don't call each other",
    ("gateway", "inbox"): "adapters don't call each other",
    ("delivery", "identity"): "delivery sends, it never authenticates",
}

PART_FLOOR = {part: index for index, (_, parts) in enumerate(FLOORS) for part in parts}


def part_of(module: str) -> str | None:
    """The longest part name that is ``module`` or a package above it."""
    pieces = module.split(".")
    for length in range(len(pieces), 0, -1):
        candidate = ".".join(pieces[:length])
        if candidate in PART_FLOOR:
            return candidate
    return None


def module_name(path: Path, root: Path = ROOT) -> tuple[str, bool]:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        return ".".join(parts[:-1]), True
    return ".".join(parts), False


def imports_of(path: Path, root: Path = ROOT) -> list[tuple[str, int]]:
    """Every module ``path`` imports (``from x import y`` counts ``x.y`` too), with its line."""
    me, is_package = module_name(path, root)
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = me.split(".") if is_package else me.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.append((module, node.lineno))
            found += [(f"{module}.{alias.name}", node.lineno) for alias in node.names]
    return found


def application_modules(root: Path = ROOT) -> list[Path]:
    roots = {part.split(".")[0] for _, parts in FLOORS for part in parts}
    return sorted(
        path
        for top in roots
        for path in (root / top).rglob("*.py")
        if "migrations" not in path.parts
    )


def arrows(root: Path = ROOT) -> dict[tuple[str, str], list[str]]:
    """(importing part, imported part) -> where, for every import between two parts."""
    found: dict[tuple[str, str], list[str]] = defaultdict(list)
    for path in application_modules(root):
        source = part_of(module_name(path, root)[0])
        for module, line in imports_of(path, root):
            target = part_of(module)
            if target is None or target == source:
                continue
            where = f"{path.relative_to(root)}:{line} imports {module}"
            if where not in found[source, target]:
                found[source, target].append(where)
    return found


def upward(found) -> list[str]:
    return sorted(
        f"{where} (floor {FLOORS[PART_FLOOR[source]][0]!r} -> {FLOORS[PART_FLOOR[target]][0]!r})"
        for (source, target), wheres in found.items()
        if PART_FLOOR[target] > PART_FLOOR[source]
        for where in wheres
    )


def circles(found) -> list[list[str]]:
    """Strongly connected sets of parts with more than one member (Tarjan's algorithm)."""
    graph = defaultdict(set)
    for source, target in found:
        graph[source].add(target)
    index, low, on_stack, stack, result = {}, {}, set(), [], []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            members = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                members.append(member)
                if member == node:
                    break
            if len(members) > 1:
                result.append(sorted(members))

    for node in list(graph):
        if node not in index:
            visit(node)
    return sorted(result)


def test_every_application_package_stands_on_a_floor():
    packages = {
        path.parent.name
        for path in ROOT.glob("*/__init__.py")
        if path.parent.name not in ("tests", "clients", "examples", "bench")
    }
    assert packages - set(PART_FLOOR) == set()


def test_no_import_points_up_a_floor():
    assert upward(arrows()) == []


def test_no_part_imports_one_it_must_never_import():
    found = arrows()
    broken = [f"{where}: {why}" for pair, why in NEVER.items() for where in found.get(pair, [])]
    assert broken == []


def test_no_circle_between_parts():
    assert circles(arrows()) == []


def test_nothing_imports_the_roof():
    found = arrows()
    assert [w for (source, target), ws in found.items() if target == "impri" for w in ws] == []


def test_the_scan_can_fail(tmp_path):
    """Each check sees what it is for: an upward lazy import, a relative one, a circle."""
    (tmp_path / "plumbing").mkdir()
    (tmp_path / "plumbing/probe.py").write_text(
        "def later():\n    from approvals.models import Action\n"
    )
    (tmp_path / "approvals").mkdir()
    (tmp_path / "approvals/__init__.py").write_text("")
    (tmp_path / "approvals/probe.py").write_text("from .api import common\n")
    assert ("approvals.api.common", 1) in imports_of(tmp_path / "approvals/probe.py", tmp_path)
    assert upward(arrows(tmp_path)) == [
        "approvals/probe.py:1 imports approvals.api (floor 'core' -> 'adapters')",
        "approvals/probe.py:1 imports approvals.api.common (floor 'core' -> 'adapters')",
        "plumbing/probe.py:2 imports approvals.models (floor 'plumbing' -> 'core')",
        "plumbing/probe.py:2 imports approvals.models.Action (floor 'plumbing' -> 'core')",
    ]
    assert circles({("a", "b"): [], ("b", "c"): [], ("c", "a"): [], ("c", "d"): []}) == [
        ["a", "b", "c"]
    ]


def test_the_drawing_in_docs_is_this_house():
    """docs/house.json names the same parts on the same floors, and breaks none of its nevers."""
    house = json.loads((ROOT / "docs/house.json").read_text())
    drawn = {
        path.rstrip("/").replace("/", ".").removesuffix(".py")
        for part in house["parts"].values()
        for path in part["is"]
    }
    assert drawn == set(PART_FLOOR)
    found = arrows()
    owner = {
        path.rstrip("/").replace("/", ".").removesuffix(".py"): name
        for name, part in house["parts"].items()
        for path in part["is"]
    }
    broken = [
        f"{source} -> {target}: {why}"
        for source, target, why in house["never"]
        for (a, b) in found
        if owner[a] == source and owner[b] == target
    ]
    assert broken == []


def test_the_project_commands_live_in_the_project_app():
    from django.core.management import get_commands

    commands = get_commands()
    for name in ("serve", "worker", "beat", "mcp", "waitdb", "backup"):
        assert commands[name] == "impri", name
        assert not (ROOT / "approvals/management/commands" / f"{name}.py").exists()
