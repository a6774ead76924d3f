"""Impri's generic package names can't be shadowed or mixed with a namesake silently."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

# Every test here runs `impri` (or python) as a subprocess.
pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]


def start_with(tmp_path: Path, extra_path: Path) -> subprocess.CompletedProcess:
    env = {
        **{k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")},
        "IMPRI_DATA_DIR": str(tmp_path / "data"),
        "PYTHONPATH": os.pathsep.join([str(extra_path), str(ROOT)]),
        "DJANGO_SETTINGS_MODULE": "impri.settings",
    }
    code = "import django; django.setup(); print('started')"
    return subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        cwd=tmp_path,  # not the source tree: `python -c` puts the working directory first
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_shadowing_namesake_stops_the_start_naming_the_package(tmp_path):
    fake = tmp_path / "site"
    (fake / "rules").mkdir(parents=True)
    (fake / "rules" / "__init__.py").write_text("")  # someone else's `rules`, first on the path
    result = start_with(tmp_path, fake)
    assert result.returncode != 0
    assert "the package 'rules' on sys.path is not Impri's" in result.stderr


def test_django_rules_mixed_into_the_same_package_is_refused(tmp_path):
    mixed = tmp_path / "site"
    (mixed / "rules").mkdir(parents=True)
    for path in (ROOT / "rules").glob("*.py"):  # Impri's files, plus django-rules' predicates
        (mixed / "rules" / path.name).write_text(path.read_text())
    (mixed / "rules" / "predicates.py").write_text("")
    result = start_with(tmp_path, mixed)
    assert result.returncode != 0
    assert "django-rules is installed into the same 'rules' package" in result.stderr


def test_impri_starts_when_the_packages_are_its_own(tmp_path):
    result = start_with(tmp_path, tmp_path / "empty")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "started"


def test_no_top_level_package_named_templates_is_installed():
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]
    assert "templates" not in tool["impri"]["apps"]  # setup.py finds packages under these only
    assert tool["setuptools"]["package-dir"]["impri.templates"] == "templates"
