"""What the import contracts cannot say about the house's floors.

The floors themselves (every import points down, at module level or inside a function,
directly or through other modules), the nevers and "nothing imports the roof" are
import-linter contracts in pyproject.toml (``[tool.importlinter]``), run by the gate
(``lint-imports``); ``tests/project/test_gate.py`` plants an arrow against each of them and
sees it break. Three things stay here because import-linter cannot hold them:

- it checks only the ``root_packages`` it is given: a new top-level app left off that list
  would be checked by nothing, so every package of the tree must be on it;
- it never reads ``docs/house.json``: the drawing must show the contracts' parts on the
  contracts' floors, and the nevers it draws must hold in the import graph;
- which app a management command belongs to is Django's registry, not an import;
- an import inside a function says why it is there (issue 41: only where start-up cost, an
  import cycle or Django's app loading needs one), in a comment on its line or just above
  its block of imports.
"""

from __future__ import annotations

import ast
import json
import re
import tomllib
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
LINTER = PROJECT["tool"]["importlinter"]
CONTRACTS = {contract["id"]: contract for contract in LINTER["contracts"]}
HOUSE = json.loads((ROOT / "docs/house.json").read_text())
NOT_APPS = {"tests", "clients", "examples", "bench", "docs", "deploy", "docker", "build"}


def floors() -> list[set[str]]:
    """The floors contract's layers, roof first: each a set of modules."""
    return [
        {name.strip() for name in re.split(r"[:|]", layer)}
        for layer in CONTRACTS["floors"]["layers"]
    ]


def dotted(path: str) -> str:
    return path.rstrip("/").removesuffix(".py").replace("/", ".")


def owner(module: str) -> str | None:
    """The house part that draws ``module``: the longest of the parts' paths that holds it."""
    best, length = None, -1
    for name, part in HOUSE["parts"].items():
        for path in part["is"]:
            prefix = dotted(path)
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > length:
                best, length = name, len(prefix)
    return best


def test_every_package_of_the_tree_is_read_by_the_contracts():
    packages = {
        path.parent.name for path in ROOT.glob("*/__init__.py") if path.parent.name not in NOT_APPS
    }
    assert packages == set(LINTER["root_packages"])


def test_the_drawing_in_docs_puts_the_contracts_parts_on_the_contracts_floors():
    """Each drawn part holds modules of one floor; no part is drawn below one under it."""
    floor_of_part: dict[str, set[int]] = {}
    for index, modules in enumerate(floors()):
        for module in modules:
            part = owner(module)
            assert part is not None, f"{module} is on a floor but in no part of docs/house.json"
            floor_of_part.setdefault(part, set()).add(index)
    assert set(floor_of_part) == set(HOUSE["parts"]), "a drawn part is on no floor"
    assert {part: len(found) for part, found in floor_of_part.items() if len(found) > 1} == {}
    row = {name: part["at"][1] for name, part in HOUSE["parts"].items()}
    for a, (fa,) in floor_of_part.items():
        for b, (fb,) in floor_of_part.items():
            if fa < fb:
                assert row[a] <= row[b], f"{a} stands above {b} but is drawn below it"


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph(*LINTER["root_packages"], cache_dir=None)


def test_the_nevers_drawn_in_docs_hold_in_the_import_graph(graph):
    modules = {name: set() for name in HOUSE["parts"]}
    for module in graph.modules:
        part = owner(module)
        if part is not None:
            modules[part].add(module)
    broken = [
        f"{source} -> {target} ({why}): {importer} -> {imported}"
        for source, target, why in HOUSE["never"]
        for importer in modules[source]
        for imported in modules[target]
        if graph.direct_import_exists(importer=importer, imported=imported)
    ]
    assert broken == []


def test_the_drawing_check_can_fail(graph):
    """An arrow planted against a drawn never is found."""
    source, target, _ = HOUSE["never"][0]
    importer = next(m for m in sorted(graph.modules) if owner(m) == source)
    imported = next(m for m in sorted(graph.modules) if owner(m) == target)
    assert not graph.direct_import_exists(importer=importer, imported=imported)
    graph.add_import(importer=importer, imported=imported)
    try:
        with pytest.raises(AssertionError):
            test_the_nevers_drawn_in_docs_hold_in_the_import_graph(graph)
    finally:
        graph.remove_import(importer=importer, imported=imported)


def test_the_project_commands_live_in_the_project_app():
    from django.core.management import get_commands

    commands = get_commands()
    for name in ("serve", "worker", "beat", "mcp", "waitdb", "backup"):
        assert commands[name] == "impri", name
        assert not (ROOT / "ops/management/commands" / f"{name}.py").exists()


OPERATOR_COMMANDS = (
    "agents",
    "createagent",
    "createreviewer",
    "grantkey",
    "prune",
    "rules",
    "token",
    "webhooksecret",
)


def test_the_operators_commands_and_admin_pages_live_in_ops():
    """The core apps hold no adapter: their commands and admin pages are the operator's."""
    from django.apps import apps
    from django.contrib import admin
    from django.core.management import get_commands
    from django.urls import reverse

    commands = get_commands()
    assert {name: commands[name] for name in OPERATOR_COMMANDS} == dict.fromkeys(
        OPERATOR_COMMANDS, "ops"
    )
    for app in ("approvals", "rules"):
        assert not (ROOT / app / "management").exists(), app
        assert not (ROOT / app / "admin.py").exists(), app
    pages = {
        "approvals.Agent": "ops.admin.approvals",
        "approvals.ApiKey": "ops.admin.approvals",
        "approvals.Action": "ops.admin.approvals",
        "auth.User": "ops.admin.approvals",
        "rules.Rule": "ops.admin.rules",
        "rules.RuleSet": "ops.admin.rules",
        "rules.RuleSetVersion": "ops.admin.rules",
        "rules.BudgetCounter": "ops.admin.rules",
    }
    found = {
        label: type(admin.site.get_model_admin(apps.get_model(label))).__module__ for label in pages
    }
    assert found == pages
    # the models keep their app: the pages keep their URLs and permission codenames
    assert reverse("admin:approvals_agent_changelist").endswith("/approvals/agent/")
    assert reverse("admin:rules_rule_yaml").endswith("/rules/rule/yaml/")


def unexplained_function_imports(source: str) -> list[int]:
    """Line numbers of imports inside a function with no comment on their line or just above
    their block of imports (blank lines and the block's other imports in between)."""
    lines = source.splitlines()
    found = []
    for function in ast.walk(ast.parse(source)):
        if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for node in ast.walk(function):
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            above = node.lineno - 1
            while above > 0 and not lines[above - 1].lstrip().startswith("#"):
                text = lines[above - 1].strip()
                if (
                    text
                    and not text.startswith(("from ", "import ", ")"))
                    and not text.endswith(",")
                ):
                    break
                above -= 1
            said = "#" in lines[node.lineno - 1] or (
                above > 0 and lines[above - 1].lstrip().startswith("#")
            )
            if not said:
                found.append(node.lineno)
    return found


def test_an_import_inside_a_function_says_why():
    packages = {path.parent for path in ROOT.glob("*/__init__.py")} - {
        ROOT / name for name in NOT_APPS
    }
    unexplained = [
        f"{path.relative_to(ROOT)}:{line}"
        for package in sorted(packages)
        for path in sorted(package.rglob("*.py"))
        if "migrations" not in path.parts
        for line in unexplained_function_imports(path.read_text())
    ]
    assert not unexplained, f"imports inside functions with no reason given: {unexplained}"


def test_the_reason_check_sees_an_unexplained_import_and_a_said_one():
    source = """
def quiet():
    x = 1
    from a import b

    return b


def said():
    # a cycle: a imports this module
    from a import b
    from a import (
        c,
    )
    return b, c


def inline():
    import a  # heavy: only the server needs it
"""
    assert unexplained_function_imports(source) == [4]
