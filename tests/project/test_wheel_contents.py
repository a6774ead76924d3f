"""The wheel holds every file the apps need: what `pip install .` (the README, the image) gets.

The suite runs Impri from its source tree, where a file the package list leaves out is still
found; installed, it is a 500 (gateway.templatetags was: /admin/ could not load its tag
library). The wheel is built once per session from the tracked files, as a fresh clone has
them, and compared with ``git ls-files``.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path, PurePosixPath

import pytest

pytestmark = pytest.mark.e2e  # builds a wheel with pip (a subprocess, and the package index)

ROOT = Path(__file__).resolve().parents[2]
APPS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["impri"]["apps"]
# What an app's pages and code are made of: code, templates, scripts, styles, data, images.
SHIPPED = {".py", ".html", ".js", ".css", ".json", ".png", ".svg", ".ico", ".jpg", ".webp", ".gif"}
# Tracked folders installed under another name (pyproject's [tool.setuptools.package-dir]).
RENAMED = {"templates": "impri/templates"}


def tracked() -> list[str]:
    listed = subprocess.run(
        # Tracked, and new files not yet committed (not the ignored ones: a checkout's build/).
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [path for path in listed.split("\0") if path and (ROOT / path).is_file()]


@pytest.fixture(scope="session")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    """The wheel built from a copy of the tracked files (no egg-info, no build/ of a checkout)."""
    work = tmp_path_factory.mktemp("wheel")
    source = work / "source"
    for path in tracked():
        (source / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / path, source / path)
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(work), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr
    [path] = work.glob("impri-*.whl")
    with zipfile.ZipFile(path) as archive:
        yield archive


def expected_in_wheel() -> dict[str, str]:
    """Installed path -> tracked path, for every shipped kind of file under the apps."""
    wanted = {}
    for path in tracked():
        parts = PurePosixPath(path).parts
        if PurePosixPath(path).suffix not in SHIPPED or len(parts) < 2:
            continue
        if parts[0] in APPS:
            wanted[path] = path
        elif parts[0] in RENAMED:
            wanted[f"{RENAMED[parts[0]]}/{'/'.join(parts[1:])}"] = path
    return wanted


def test_every_tracked_file_of_the_apps_is_in_the_wheel(wheel):
    names = set(wheel.namelist())
    wanted = expected_in_wheel()
    assert len(wanted) > 250, len(wanted)  # the apps were found where pyproject says they are
    missing = sorted(tracked_path for path, tracked_path in wanted.items() if path not in names)
    assert not missing, f"left out of the wheel: {missing}"


def test_the_wheel_holds_the_apps_and_nothing_else(wheel):
    tops = {PurePosixPath(name).parts[0] for name in wheel.namelist()}
    extra = {top for top in tops if top not in APPS and not top.endswith(".dist-info")}
    assert not extra, f"installed beside the apps: {sorted(extra)}"
    # The template tags a page loads by name: without them /admin/ is a 500 when installed.
    assert "gateway/templatetags/gateway_ops.py" in wheel.namelist()
