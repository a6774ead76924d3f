"""The README's command (``-n 4 --dist loadgroup``) keeps an ``xdist_group``'s tests on one
worker: tests/conftest.py groups each e2e module so its live deployment, started by a
module fixture, is started once. When a pytest or xdist release stops honouring the mark,
nothing fails but the suite takes several times longer (pytest 9.2 with xdist 3.8:
pytest-dev/pytest-xdist#1386); this test fails instead."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e  # a pytest of its own, with two workers

MODULE = """
import os
import pytest

pytestmark = pytest.mark.xdist_group("{group}")


@pytest.mark.parametrize("n", range(6))
def test_records_its_worker(n):
    with open(os.environ["WORKERS_LOG"], "a") as log:
        log.write("{group} " + os.environ["PYTEST_XDIST_WORKER"] + "\\n")
"""


def test_each_group_runs_on_one_worker(tmp_path: Path):
    for group in ("first", "second", "third"):
        (tmp_path / f"test_{group}.py").write_text(MODULE.format(group=group))
    log = tmp_path / "workers.log"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-n",
            "2",
            "--dist",
            "loadgroup",
            "-p",
            "no:cacheprovider",
        ],
        cwd=tmp_path,
        env={**os.environ, "WORKERS_LOG": str(log), "PYTEST_ADDOPTS": ""},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    workers: dict[str, set[str]] = defaultdict(set)
    for line in log.read_text().splitlines():
        group, worker = line.split()
        workers[group].add(worker)
    assert set(workers) == {"first", "second", "third"}
    assert all(len(seen) == 1 for seen in workers.values()), dict(workers)
