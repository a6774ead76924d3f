"""Every third-party module Impri imports is a dependency it declares.

A module that arrives only as somebody else's dependency (requests through
mozilla-django-oidc, httpx2 through the MCP SDK) works until that package drops
it or changes its range; then `pip install impri` breaks without any change of
ours. So every import in the shipped packages (module level and inside
functions, read with ast, never executed) must be the standard library, one of
our own packages, or provided by a distribution named in pyproject's
[project] dependencies. Which distribution provides a module is read from the
installed environment (importlib.metadata), so the check runs in the test venv.

Test-only packages (the test extra) are flagged on their own: installed here,
they would otherwise look harmless, and fail only in a plain `pip install .`.
"""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import re
import sys
import tomllib
from collections.abc import Iterable
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_names(requirements: Iterable[str]) -> set[str]:
    return {normalize(re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", r.strip())[0]) for r in requirements}


RUNTIME = requirement_names(PROJECT["project"]["dependencies"])
TEST_ONLY = requirement_names(PROJECT["project"]["optional-dependencies"]["test"]) - RUNTIME
OWN = set(PROJECT["tool"]["impri"]["apps"])  # setup.py installs the packages under them


def imported_modules(paths: Iterable[Path]) -> dict[str, set[Path]]:
    """Top-level module name -> the files that import it (absolute imports only)."""
    found: dict[str, set[Path]] = {}
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                found.setdefault(name.split(".")[0], set()).add(path)
    return found


def _owns(distribution: str, module: str) -> bool:
    for file in importlib.metadata.files(distribution) or ():
        parts = file.parts
        if parts == (module, "__init__.py"):
            return True
        if len(parts) == 1 and parts[0].split(".")[0] == module and file.suffix in (".py", ".so"):
            return True
    return False


@functools.cache
def providers(module: str) -> frozenset[str]:
    """The distributions that provide `module`, normalized.

    packages_distributions() lists every distribution with a file under the
    module's folder: autobahn and daphne ship twisted/plugins/, yet Twisted
    is the one that provides `twisted`. So the distribution that installs the
    module's __init__.py (or the module file itself) wins; a namespace package
    (no __init__.py) falls back to all of them.
    """
    candidates = importlib.metadata.packages_distributions().get(module, [])
    owners = [d for d in candidates if _owns(d, module)] or candidates
    return frozenset(normalize(d) for d in owners)


def problems(
    imports: dict[str, set[Path]],
    *,
    runtime: set[str] = RUNTIME,
    test_only: set[str] = TEST_ONLY,
    own: set[str] = OWN,
) -> list[str]:
    found = []
    for module, paths in sorted(imports.items()):
        if module in sys.stdlib_module_names or module in own:
            continue
        dists = providers(module)
        where = ", ".join(
            sorted(str(p.relative_to(ROOT) if p.is_relative_to(ROOT) else p) for p in paths)
        )
        if dists & runtime:
            continue
        if dists & test_only:
            found.append(f"{module}: test-only ({', '.join(sorted(dists))}), imported by {where}")
        elif dists:
            found.append(
                f"{module}: from {', '.join(sorted(dists))}, undeclared, imported by {where}"
            )
        else:
            found.append(f"{module}: no installed distribution provides it, imported by {where}")
    return found


def application_files() -> list[Path]:
    files = [path for package in sorted(OWN) for path in (ROOT / package).rglob("*.py")]
    assert len(files) > 100, files  # the packages were found where pyproject says they are
    return files


def test_every_import_of_the_application_is_a_declared_dependency():
    assert problems(imported_modules(application_files())) == []


def test_it_flags_an_undeclared_package_imported_inside_a_function(tmp_path):
    module = tmp_path / "stray.py"
    module.write_text(
        "import json\nimport approvals.models\n\n"
        "def fetch():\n    import requests\n    from mcp_types import Tool\n"
    )
    found = problems(imported_modules([module]), runtime={"django"})
    assert [line.split(":")[0] for line in found] == ["mcp_types", "requests"]
    assert "stray.py" in found[0] and "undeclared" in found[0]


def test_it_names_the_distribution_that_owns_a_shared_folder(tmp_path):
    # autobahn and daphne put files under twisted/plugins/: declaring daphne is not declaring Twisted.
    module = tmp_path / "reactor.py"
    module.write_text("from twisted.internet import reactor\n")
    assert providers("twisted") == {"twisted"}
    assert problems(imported_modules([module]), runtime={"daphne", "autobahn"}) != []
    assert problems(imported_modules([module]), runtime={"twisted"}) == []


def test_it_flags_a_test_only_package_and_an_uninstalled_one(tmp_path):
    module = tmp_path / "leak.py"
    module.write_text("import time_machine\nimport no_such_module_anywhere\n")
    found = problems(imported_modules([module]))
    assert found[0].startswith("no_such_module_anywhere: no installed distribution")
    assert found[1].startswith("time_machine: test-only (time-machine)")


def test_the_test_extra_adds_tools_and_repeats_no_runtime_dependency():
    # Listed twice, a package has two ranges that can drift apart; the runtime one is the truth.
    test_extra = requirement_names(PROJECT["project"]["optional-dependencies"]["test"])
    assert {"pytest", "playwright", "ruff"} <= TEST_ONLY
    assert test_extra & RUNTIME == set()


def locked_versions(text: str) -> dict[str, set[str]]:
    """Name -> its pinned versions (a universal lock pins some twice, under exclusive markers)."""
    pins: dict[str, set[str]] = {}
    for name, version in re.findall(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)", text, re.M):
        pins.setdefault(normalize(name), set()).add(version)
    return pins


def out_of_range(requirements: Iterable[str], pins: dict[str, set[str]]) -> list[str]:
    found = []
    for requirement in map(Requirement, requirements):
        versions = pins.get(normalize(requirement.name), set())
        if not any(requirement.specifier.contains(v, prereleases=True) for v in versions):
            found.append(f"{requirement} (locked: {', '.join(sorted(versions)) or 'nothing'})")
    return found


def test_the_lock_satisfies_every_declared_range():
    # pyproject changed and the lock not regenerated: the image would ship what we no longer allow.
    pins = locked_versions((ROOT / "requirements.lock").read_text())
    assert out_of_range(PROJECT["project"]["dependencies"], pins) == []


def test_a_range_the_lock_misses_is_reported():
    pins = locked_versions("django==5.2.19 \\\n    --hash=sha256:00\nhttpx==0.29.0 \\\n")
    assert pins == {"django": {"5.2.19"}, "httpx": {"0.29.0"}}
    assert out_of_range(["django>=5.2,<5.3", "httpx>=0.28,<0.29", "segno>=1.6"], pins) == [
        "httpx<0.29,>=0.28 (locked: 0.29.0)",
        "segno>=1.6 (locked: nothing)",
    ]
