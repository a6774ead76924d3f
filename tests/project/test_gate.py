"""The gate in front of the tests (issue 41): what it runs, where CI runs it, and that it can fail.

`.pre-commit-config.yaml` lists the checks; `.ci/run` runs them before the first leg; the
tools are pinned in the test extra. The import-linter contracts in pyproject.toml are the
floors of tests/project/test_layers.py: the same parts on the same floors, the same
nevers, and each contract breaks on an arrow planted against it in the import graph of
today's tree (import-linter's own contract classes, no subprocess).
"""

from __future__ import annotations

import copy
import importlib.metadata
import re
import tomllib
from pathlib import Path

import grimp
import pytest
import yaml
from importlinter.api import read_configuration
from importlinter.contracts.forbidden import ForbiddenContract
from importlinter.contracts.layers import LayersContract
from packaging.requirements import Requirement

from tests.project.test_layers import FLOORS, NEVER

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
    [gate] = [i for i, line in enumerate(lines) if "pre-commit run --all-files" in line]
    first_leg = min(i for i, line in enumerate(lines) if "run_tests --create-db" in line)
    assert gate < first_leg
    assert lines[gate].startswith(".venv-test/bin/pre-commit")
    assert any('PATH="$PWD/.venv-test/bin:$PATH"' in line for line in lines[gate - 1 : gate + 1])
    [start] = [i for i, line in enumerate(lines) if line.startswith('echo "== the gate')]
    installs = [line for line in lines[start:gate] if ".venv-test/bin/pip install" in line]
    assert "--require-hashes -r requirements.lock" in installs[0]  # the lock first, as leg 1
    assert "-e '.[test]'" in installs[-1]  # the test extra brings the gate's tools


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


KINDS = {"layers": Layers, "forbidden": Forbidden}


def layer_modules(layer: str) -> set[str]:
    return {name.strip() for name in re.split(r"[:|]", layer)}


def test_the_contracts_read_every_app_and_only_the_apps():
    assert sorted(CONFIG["session_options"]["root_packages"]) == sorted(APPS)
    assert sorted(PROJECT["tool"]["deptry"]["known_first_party"]) == sorted(APPS)


def test_the_floors_contract_is_the_floors_of_the_layers_test():
    """Same parts on the same floors; approvals' core is its modules that are not adapters."""
    core = {f"approvals.{tail}" for tail in layer_modules(CONTRACTS["approvals"]["layers"][1])}
    adapters = {f"approvals.{tail}" for tail in layer_modules(CONTRACTS["approvals"]["layers"][0])}
    expected = [
        {module for part in parts for module in (core if part == "approvals" else {part})}
        for _, parts in reversed(FLOORS)
    ]
    assert [layer_modules(layer) for layer in CONTRACTS["floors"]["layers"]] == expected
    assert adapters == {part for _, parts in FLOORS for part in parts if part.count(".") == 1}


def test_the_forbidden_contracts_are_the_nevers_of_the_layers_test():
    forbidden = {
        (source, target)
        for options in CONTRACTS.values()
        if options["type"] == "forbidden"
        for source in options["source_modules"]
        for target in options["forbidden_modules"]
    }
    assert forbidden == set(NEVER)


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
        ("approvals.errors", "approvals.api.common", {"floors", "approvals"}),  # core -> adapter
        ("approvals.models", "delivery.probe", {"floors"}),  # core -> beside the core
        ("twofactor.probe", "approvals.api.common", {"floors"}),  # beside -> adapter in approvals
        ("webpush.probe", "impri.settings", {"floors"}),  # nothing imports the roof
        ("delivery.probe", "identity.models", {"delivery-sends"}),
        ("slackapp.probe", "inbox.views", {"adapters-apart"}),
        ("gateway.probe", "approvals.models", set()),  # down a floor: allowed
        ("inbox.probe", "gateway.probe", set()),  # across the adapters' floor: allowed
    ],
)
def test_an_arrow_against_the_floors_breaks_its_contract(graph, importer, imported, breaks):
    planted = copy.deepcopy(graph)
    planted.add_import(importer=importer, imported=imported, line_number=1, line_contents="")
    assert broken(planted) == breaks


def test_a_module_of_approvals_on_no_floor_breaks_the_approvals_contract(graph):
    planted = copy.deepcopy(graph)
    planted.add_module("approvals.newcomer")
    assert broken(planted) == {"approvals"}


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
