"""Configuration: environment only, safe defaults, every variable documented."""

from __future__ import annotations

import ast
import functools
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.source import application_trees

ROOT = Path(__file__).resolve().parents[2]


def settings_in(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("IMPRI_") and k not in ("SECRET_KEY",)
    }
    clean.pop("DATABASE_URL", None)
    clean.pop("REDIS_URL", None)
    code = "from django.conf import settings as s; print(s.SECRET_KEY); print(s.DATABASES['default']['ENGINE'])"
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "import django, os; os.environ['DJANGO_SETTINGS_MODULE']='impri.settings'; " + code,
        ],
        env={**clean, "IMPRI_DATA_DIR": str(tmp_path), "PYTHONPATH": str(ROOT), **env},
        capture_output=True,
        text=True,
    )


@pytest.mark.e2e  # a subprocess reads the settings afresh
def test_without_secret_key_one_is_generated_once_and_kept_private(tmp_path):
    first = settings_in(tmp_path)
    second = settings_in(tmp_path)
    assert first.returncode == 0, first.stderr
    key = first.stdout.splitlines()[0]
    assert len(key) >= 50
    assert second.stdout.splitlines()[0] == key
    assert (tmp_path / "secret_key").stat().st_mode & 0o077 == 0
    other = settings_in(tmp_path / "elsewhere")
    assert other.stdout.splitlines()[0] != key


@pytest.mark.e2e  # a subprocess reads the settings afresh
def test_secret_key_from_the_environment_wins(tmp_path):
    assert settings_in(tmp_path, SECRET_KEY="from-env").stdout.splitlines()[0] == "from-env"


@pytest.mark.e2e  # a subprocess reads the settings afresh
def test_database_url_switches_to_postgresql(tmp_path):
    out = settings_in(tmp_path, DATABASE_URL="postgres://u:p@db:5432/impri").stdout.splitlines()
    assert out[1] == "django.db.backends.postgresql"
    assert settings_in(tmp_path).stdout.splitlines()[1] == "django.db.backends.sqlite3"


@pytest.mark.e2e  # a subprocess reads the settings afresh
def test_a_bad_number_fails_loudly_naming_the_variable(tmp_path):
    result = settings_in(tmp_path, IMPRI_MAX_BODY_BYTES="lots")
    assert result.returncode != 0
    assert "IMPRI_MAX_BODY_BYTES must be an integer" in result.stderr


# Every way application code reads an environment variable: os.environ.get, os.environ[...],
# os.getenv, and every function that hands its own parameter on to one of those
# (settings' env/envbool/envint/envfloat/_networks, cli's _env...), found by the scan itself.
APP_DIRS = tuple(name for name in application_trees() if name not in ("clients", "examples"))
# The gateway interpolates ``${VAR}`` names its operator writes in the gateway's YAML.
NOT_OURS = {("gateway/upstream.py", "value")}


def _constants(tree: ast.Module) -> dict[str, str]:
    """Module-level ``NAME = "literal"`` assignments (a variable's name kept in a constant)."""
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            for target in node.targets:
                if isinstance(target, ast.Name) and isinstance(node.value.value, str):
                    found[target.id] = node.value.value
    return found


def _is_environ(node) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "environ") or (
        isinstance(node, ast.Name) and node.id == "environ"
    )


def _name_argument(node, readers: set[str]):
    """The expression naming the variable, if ``node`` reads one."""
    if isinstance(node, ast.Subscript) and _is_environ(node.value):
        return node.slice if isinstance(node.ctx, ast.Load) else None
    if not (isinstance(node, ast.Call) and node.args):
        return None
    func = node.func
    if isinstance(func, ast.Attribute) and func.attr == "get" and _is_environ(func.value):
        return node.args[0]
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    return node.args[0] if name in readers else None


def _own_nodes(scope):
    """The nodes of a module or function, without those of the functions inside it."""
    functions = ast.FunctionDef | ast.AsyncFunctionDef
    stack = [node for node in scope.body if not isinstance(node, functions)]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(c for c in ast.iter_child_nodes(node) if not isinstance(c, functions))


def _is_file_variant(argument) -> bool:
    """``f"{name}_FILE"``: the Docker-secret variant every variable has."""
    return isinstance(argument, ast.JoinedStr) and (
        isinstance(argument.values[-1], ast.Constant) and argument.values[-1].value == "_FILE"
    )


@functools.cache
def env_reads() -> tuple[frozenset[str], frozenset[tuple[str, str]]]:
    """(variable names read, (file, function) of reads whose name the scan can't tell)."""
    nodes = []  # (file, scope, its parameters, its constants, node), walked once
    for folder in APP_DIRS:
        for path in (ROOT / folder).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            tree = ast.parse(path.read_text())
            constants = _constants(tree)
            scopes = [tree] + [
                node
                for node in ast.walk(tree)
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            ]
            for scope in scopes:
                params = {a.arg for a in scope.args.args} if scope is not tree else set()
                where = path.relative_to(ROOT).as_posix()
                nodes += [
                    (where, scope, params, constants, node)
                    for node in _own_nodes(scope)
                    if isinstance(node, ast.Call | ast.Subscript)
                ]
    readers = {"getenv"}
    while True:  # until no new function passes its parameter on to a reader
        names, computed, passing = set(), set(), set()
        for where, scope, params, constants, node in nodes:
            argument = _name_argument(node, readers)
            if argument is None or _is_file_variant(argument):
                continue
            if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
                names.add(argument.value)
            elif isinstance(argument, ast.Name) and argument.id in constants:
                names.add(constants[argument.id])
            elif isinstance(argument, ast.Name) and argument.id in params:
                passing.add(scope.name)
            else:
                computed.add((where, getattr(scope, "name", "<module>")))
        if passing <= readers:
            return frozenset(names - {"DJANGO_SETTINGS_MODULE"}), frozenset(computed)
        readers |= passing


def variables_read() -> set[str]:
    return env_reads()[0]


def test_the_scan_sees_reads_outside_settings():
    # The scan itself must be able to fail: it finds the reads it is meant to find,
    # including a name kept in a module constant (createreviewer's PASSWORD_ENV).
    assert {
        "IMPRI_API_KEY",
        "IMPRI_HOST",
        "IMPRI_DATA_DIR",
        "DATABASE_URL",
        "IMPRI_REVIEWER_PASSWORD",
        "IMPRI_TRUSTED_PROXIES",
    } <= variables_read()


def test_every_environment_read_names_its_variable():
    # A read through a name the scan can't tell would escape the check below.
    assert sorted(env_reads()[1] - NOT_OURS) == []


def test_env_example_lists_every_variable_the_code_reads():
    read = variables_read()
    documented = set(
        re.findall(r"^#?\s*([A-Z][A-Z0-9_]*)=", (ROOT / ".env.example").read_text(), re.M)
    )
    assert sorted(read - documented) == []
    listed = (ROOT / "docs/configuration.md").read_text()  # generated: impri/settings_vars.py
    assert [name for name in sorted(read) if f"`{name}`" not in listed] == []


@pytest.mark.e2e  # a subprocess reads the settings afresh
def test_the_console_script_wraps_manage_py():
    script = Path(sys.executable).parent / "impri"
    assert script.exists(), "install the project (pip install -e .) so the impri script exists"
    result = subprocess.run([str(script), "help"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0
    for command in ("serve", "createagent", "createreviewer", "token", "migrate"):
        assert command in result.stdout


def test_serve_makes_full_garbage_collections_rarer(settings):
    import gc

    from impri.management.commands import serve

    settings.IMPRI_GC_FULL_EVERY = 1234
    before = gc.get_threshold()
    try:
        serve._tune_gc()
        assert gc.get_threshold() == (before[0], before[1], 1234)
    finally:
        gc.set_threshold(*before)


@pytest.mark.e2e  # a subprocess reads the settings afresh
def test_the_data_dir_and_the_sqlite_database_are_private(tmp_path):
    data = tmp_path / "data"
    data.mkdir(mode=0o755)
    data.chmod(0o755)
    result = settings_in(data)
    assert result.returncode == 0, result.stderr
    assert data.stat().st_mode & 0o777 == 0o700
    assert (data / "impri.sqlite3").stat().st_mode & 0o777 == 0o600
    assert (data / "secret_key").stat().st_mode & 0o777 == 0o600
    fresh = tmp_path / "fresh" / "data"
    assert settings_in(fresh).returncode == 0
    assert fresh.stat().st_mode & 0o777 == 0o700
