"""Impri runs its own packages, whatever folder it is started from (issue 43).

Celery's Django fix-up and daphne's command line put the working directory first on
``sys.path``: `impri serve` started in a folder holding a ``rules/`` package ran that code.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.live import Deployment, free_port

pytestmark = pytest.mark.e2e

IMPRI = Path(sys.executable).parent / "impri"  # the console script, as an operator runs it


def fake_package(folder: Path, name: str, marker: str) -> None:
    """A namesake convincing enough for impri.packages (it has Impri's marker file)."""
    package = folder / name
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        f"from pathlib import Path\nPath({str(folder / 'imported')!r}).write_text({name!r})\n"
    )
    (package / marker).write_text("")


def test_serve_in_a_folder_with_a_rules_package_runs_impris_own(tmp_path):
    deployment = Deployment()
    folder = tmp_path / "project"
    fake_package(folder, "rules", "engine.py")
    fake_package(folder, "audit", "canonical.py")
    (folder / "yaml.py").write_text(
        f"from pathlib import Path\nPath({str(folder / 'imported')!r}).write_text('yaml')\n"
    )
    port = free_port()
    log = tmp_path / "serve.log"
    with open(log, "w") as out:
        process = subprocess.Popen(
            [str(IMPRI), "serve", "--port", str(port)],
            env=deployment.env,
            cwd=folder,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 90
        while True:
            assert process.poll() is None, log.read_text()
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)  # a process starting: a bounded poll
        # A page that renders templates and a rules import on the way: the server's own code.
        assert httpx.get(f"http://127.0.0.1:{port}/accounts/login/").status_code == 200
        assert not (folder / "imported").exists(), (folder / "imported").read_text()
        checked = subprocess.run(
            [str(IMPRI), "shell", "--no-imports", "-c", "import rules, sys; print(rules.__file__)"],
            env=deployment.env,
            cwd=folder,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert checked.returncode == 0, checked.stderr
        assert not checked.stdout.strip().startswith(str(folder)), checked.stdout
        assert not (folder / "imported").exists(), (folder / "imported").read_text()
    finally:
        process.terminate()
        process.wait(timeout=20)
        deployment.close()
