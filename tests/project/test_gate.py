"""The gate in front of the tests (issue 41): what it runs, where CI runs it, and that it can fail.

`.pre-commit-config.yaml` lists the checks; `.ci/run` runs them before the first leg; the
tools are pinned in the test extra. The import-linter contracts in pyproject.toml are the
house's floors (docs/ARCHITECTURE.md): each contract breaks on an arrow planted against it
in the import graph of today's tree (import-linter's own contract classes, no subprocess),
and `lint-imports` itself fails on a tree with an arrow back up.
"""

from __future__ import annotations

import ast
import copy
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import grimp
import pytest
import yaml
from importlinter.api import read_configuration
from importlinter.contracts.forbidden import ForbiddenContract
from importlinter.contracts.independence import IndependenceContract
from importlinter.contracts.layers import LayersContract
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
APPS = PROJECT["tool"]["impri"]["apps"]

# Hook id -> the command it runs.
GATE = {
    "ruff-check": "ruff check",
    "ruff-format": "ruff format --check",
    "lint-imports": "lint-imports",
    "deptry": "deptry .",
    "makemigrations": "impri makemigrations --check --dry-run",
    "mypy": "mypy",
}
# The distributions that provide those commands (impri is the project itself).
TOOLS = ("ruff", "mypy", "django-stubs", "import-linter", "deptry", "pre-commit")


def test_the_pre_commit_config_runs_every_check_of_the_gate_with_the_venvs_tools():
    config = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())
    assert [repo["repo"] for repo in config["repos"]] == ["local"]  # nothing to fetch
    hooks = {hook["id"]: hook for repo in config["repos"] for hook in repo["hooks"]}
    assert {name: hook["entry"] for name, hook in hooks.items()} == GATE
    for name, hook in hooks.items():
        # The whole tree each time: a commit and CI run the same command.
        assert hook["language"] == "system" and hook["pass_filenames"] is False, name


def test_each_tool_of_the_gate_is_pinned_in_the_test_extra():
    pins = {}
    for line in PROJECT["project"]["optional-dependencies"]["test"]:
        requirement = Requirement(line)
        pins[requirement.name] = [(s.operator, s.version) for s in requirement.specifier]
    for tool in TOOLS:
        [(operator, version)] = pins[tool]
        assert operator == "==", tool
        assert importlib.metadata.version(tool) == version, tool  # this venv runs the pin


def ci_lines() -> list[str]:
    text = (ROOT / ".ci/run").read_text().replace("\\\n", " ")
    return [line.strip() for line in text.splitlines() if not line.lstrip().startswith("#")]


def test_ci_runs_the_gate_in_the_test_venv_before_the_first_leg():
    lines = ci_lines()
    legs = [line.split()[-1] for line in lines if line.startswith("leg ")]
    assert legs[:4] == ["services", "gate", "tests_sqlite", "tests_postgres"], legs
    assert legs[-1] == "newest_result", legs  # the newest allowed versions speak last
    start = lines.index("gate() {")
    end = start + lines[start:].index("}")
    body = lines[start:end]
    [gate] = [i for i, line in enumerate(body) if "pre-commit run --all-files" in line]
    assert body[gate].startswith(".venv-test/bin/pre-commit")
    assert any('PATH="$PWD/.venv-test/bin:$PATH"' in line for line in body[gate - 1 : gate + 1])
    installs = [line for line in body[:gate] if ".venv-test/bin/pip install" in line]
    assert "--require-hashes -r requirements.lock" in installs[0]  # the lock first
    assert "-e '.[test]'" in installs[-1]  # the test extra brings the gate's tools


def test_ci_runs_the_fast_loop_on_the_newest_allowed_versions_last_and_fails_on_it():
    """Not the lock: a fresh venv, pyproject's ranges at their newest, the fast loop."""
    lines = ci_lines()
    start = lines.index("newest_allowed() {")
    body = lines[start : start + lines[start:].index("}")]
    assert "rm -rf .venv-newest" in body and "python3 -m venv .venv-newest" in body
    [install] = [line for line in body if ".venv-newest/bin/pip install" in line]
    assert "requirements.lock" not in install and "--require-hashes" not in install
    assert "--upgrade --upgrade-strategy eager -e '.[test]' './clients/python[grants]'" in install
    [run] = [line for line in body if ".venv-newest/bin/pytest" in line]
    assert '-m "not e2e"' in run
    # A failure fails CI: nothing swallows the leg's exit status.
    assert not any("|| true" in line or "|| echo" in line for line in body)
    assert "set -euo pipefail" in lines
    # It runs in the background from before leg 3; the last leg waits for it and returns its
    # exit status (set -e fails the run on it), after printing what it printed.
    start = lines.index("start_newest() {")
    starter = lines[start : start + lines[start:].index("}")]
    assert '(newest_allowed) >"$NEWEST_LOG" 2>&1 &' in starter
    lanes = [i for i, line in enumerate(lines) if line.startswith("lane ")]
    assert lanes and lines.index("start_newest") < min(lanes)
    start = lines.index("newest_result() {")
    result = lines[start : start + lines[start:].index("}")]
    assert 'wait "$NEWEST_PID" || rc=$?' in result and 'return "$rc"' in result


def test_ci_runs_each_check_once_legs_3_to_the_fuzzing_in_lanes_and_fails_on_any():
    lines = ci_lines()
    checks = ("install_check", "image_check", "proxy_check", "clients_check", "schemathesis_check")
    for check in checks:
        runs = [line for line in lines if line.startswith("lane ") and line.endswith(check)]
        runs += [
            line for line in lines if line.startswith(("lane ", "leg ")) and f" {check} " in line
        ]
        assert len(runs) == 1, (check, runs)
    # A lane is a subshell under set -e whose status lanes_result waits for and returns.
    start = lines.index("lanes_result() {")
    body = lines[start : start + lines[start:].index("}")]
    assert 'wait "${LANE_PIDS[$i]}" || rc=$?' in body and "return 1" in body
    assert not any("|| true" in line for line in body)
    legs = [line.split()[-1] for line in lines if line.startswith("leg ")]
    assert legs[-2:] == ["lanes_result", "newest_result"], legs


# --- The import contracts ------------------------------------------------------------------

CONFIG = read_configuration(str(ROOT / "pyproject.toml"))
CONTRACTS = {options["id"]: options for options in CONFIG["contracts_options"]}


# The suite imports Twisted, whose zope.interface declares what abc.ABC provides; reading
# __provides__ through a subclass of ABC then raises AttributeError, and a contract's
# constructor reads every attribute of its class (the clash LibCST's issue 1458 reports).
class Layers(LayersContract):
    __provides__ = None


class Forbidden(ForbiddenContract):
    __provides__ = None


class Independence(IndependenceContract):
    __provides__ = None


KINDS = {"layers": Layers, "forbidden": Forbidden, "independence": Independence}


def layer_modules(layer: str) -> set[str]:
    return {name.strip() for name in re.split(r"[:|]", layer)}


def test_the_contracts_read_every_app_and_only_the_apps():
    assert sorted(CONFIG["session_options"]["root_packages"]) == sorted(APPS)
    assert sorted(PROJECT["tool"]["deptry"]["known_first_party"]) == sorted(APPS)


def test_each_core_app_lists_every_module_on_one_floor():
    """approvals' and rules' modules on the floors are exactly their own contracts' modules.

    Their admin pages and commands are the operator's (``ops``): each app is one floor.
    """
    floors = [layer_modules(layer) for layer in CONTRACTS["floors"]["layers"]]
    for app in ("approvals", "rules"):
        (layer,) = CONTRACTS[app]["layers"]
        modules = {f"{app}.{tail}" for tail in layer_modules(layer)}
        on_floors = [{m for m in floor if m.startswith(app + ".")} for floor in floors]
        assert [floor for floor in on_floors if floor] == [modules], app


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph(*APPS, cache_dir=None)


def broken(graph: grimp.ImportGraph) -> set[str]:
    found = set()
    for name, options in CONTRACTS.items():
        contract = KINDS[options["type"]](
            name=options["name"],
            session_options=CONFIG["session_options"],
            contract_options=options,
        )
        if not contract.check(copy.deepcopy(graph), verbose=False).kept:
            found.add(name)
    return found


def test_todays_tree_keeps_every_contract(graph):
    assert broken(graph) == set()


@pytest.mark.parametrize(
    ("importer", "imported", "breaks"),
    [
        ("plumbing.probe", "approvals.models", {"floors"}),  # up from a floor below the core
        ("audit.probe", "rules.engine", {"floors"}),
        ("rules.engine", "approvals.models", {"floors"}),  # the engine knows no action
        # core -> the agents' doors (and so waiting, which imports the core, would reach them)
        ("approvals.errors", "agent_doors.api.common", {"floors", "waiting-is-mechanism"}),
        # core -> its admin pages: and through them, whatever imports the core reaches
        # identity (a chain breaks a contract as an import does)
        ("approvals.models", "ops.admin.approvals", {"floors", "delivery-sends"}),
        ("rules.engine", "ops.admin.rules", {"floors"}),
        ("rules.engine", "ops.management.commands.rules", {"floors"}),
        ("approvals.admin", "identity.keys", {"approvals"}),  # an admin back in the core
        ("rules.management", "plumbing.progress", {"rules"}),
        ("approvals.models", "delivery.probe", {"floors"}),  # core -> beside the core
        ("twofactor.probe", "agent_doors.api.common", {"floors"}),  # beside -> the agents' doors
        ("identity.probe", "delivery.probe", {"floors"}),  # apart on their floor
        ("agent_doors.mcp.server", "gateway.proxy", {"floors"}),  # agents know no gateway
        ("gateway.probe", "ops.metrics", {"floors"}),  # only the roof reads ops
        ("webpush.probe", "impri.settings", {"floors"}),  # nothing imports the roof
        ("delivery.probe", "identity.models", {"floors", "delivery-sends"}),
        ("slackapp.probe", "inbox.views", {"adapters-apart", "phones-apart"}),
        ("gateway.probe", "slackapp.blocks", {"adapters-apart"}),
        ("webpush.probe", "inbox.views", {"phones-apart"}),
        ("waiting.probe", "agent_doors.mcp.tools", {"floors", "waiting-is-mechanism"}),
        ("gateway.probe", "approvals.models", set()),  # down a floor: allowed
        ("gateway.probe", "agent_doors.mcp.http", set()),  # the gateway builds on the agents' MCP
        ("inbox.probe", "webpush.views", set()),  # the inbox mounts the phones' pages
    ],
)
def test_an_arrow_against_the_floors_breaks_its_contract(graph, importer, imported, breaks):
    planted = copy.deepcopy(graph)
    planted.add_import(importer=importer, imported=imported, line_number=1, line_contents="")
    assert broken(planted) == breaks


@pytest.mark.parametrize("app", ["approvals", "rules"])
def test_a_module_on_no_floor_breaks_its_apps_contract(graph, app):
    planted = copy.deepcopy(graph)
    planted.add_module(f"{app}.newcomer")
    assert broken(planted) == {app}


@pytest.mark.e2e
def test_lint_imports_fails_on_a_tree_with_an_arrow_back_up(tmp_path):
    """The gate's own command, on a copy of the tree where the core imports an adapter."""
    tree = tmp_path / "tree"
    for app in APPS:
        shutil.copytree(ROOT / app, tree / app, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tree / "pyproject.toml")
    lint = Path(sys.executable).parent / "lint-imports"
    env = {**os.environ, "PYTHONPATH": str(tree)}

    def run():
        return subprocess.run(
            [str(lint), "--no-cache"], cwd=tree, env=env, capture_output=True, text=True
        )

    kept = run()
    assert kept.returncode == 0, kept.stdout[-2000:]
    with (tree / "approvals/presenters.py").open("a") as module:
        module.write("\n\ndef _later():\n    from agent_doors.api import common  # noqa: F401\n")
    planted = run()
    assert planted.returncode == 1
    assert "approvals.presenters -> agent_doors.api.common" in planted.stdout


def test_the_graph_counts_lazy_and_relative_imports(tmp_path, monkeypatch):
    """As the layers test's scan does: an import inside a function, a relative one."""
    package = tmp_path / "floorprobe"
    (package / "high").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "high/__init__.py").write_text("")
    (package / "high/api.py").write_text("")
    (package / "low.py").write_text("def later():\n    from floorprobe.high import api\n")
    (package / "middle.py").write_text("from .high import api\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    probe = grimp.build_graph("floorprobe", cache_dir=None)
    assert probe.direct_import_exists(importer="floorprobe.low", imported="floorprobe.high.api")
    assert probe.direct_import_exists(importer="floorprobe.middle", imported="floorprobe.high.api")


def module_names_defined_twice(source: str) -> list[str]:
    """Names a module defines twice at its top level with ``def`` or ``class``: the first
    definition is lost (for a test, never collected)."""
    seen: set[str] = set()
    twice = []
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            if node.name in seen:
                twice.append(node.name)
            seen.add(node.name)
    return twice


def test_no_test_module_defines_a_name_twice():
    # ruff's F811 (a redefinition) is off in the browser tests, which take the fixtures they
    # import from tests/browser.py as arguments of the same name; this keeps what it caught
    # there, and everywhere: a second test of one name silently replaces the first.
    twice = {
        str(path.relative_to(ROOT)): names
        for path in sorted((ROOT / "tests").rglob("*.py"))
        if (names := module_names_defined_twice(path.read_text()))
    }
    assert twice == {}


def test_the_twice_check_sees_a_test_defined_twice():
    source = "def test_a():\n    pass\n\n\nclass B:\n    pass\n\n\ndef test_a():\n    pass\n"
    assert module_names_defined_twice(source) == ["test_a"]
