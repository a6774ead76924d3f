"""The project's own Python source, for tests that read code rather than run it.

Every top-level package of the repository (a folder with ``__init__.py``: the
Django apps, ``impri``, and any app added later) plus the Python client and the
examples; tests, benchmarks, migrations and build output aside.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOT_APPLICATION = {"tests", "bench", "docs", "deploy", "docker", "templates"}
ALWAYS = ("clients", "examples")
SKIPPED_DIRS = {"migrations", "tests", "build", "dist", "__pycache__", "node_modules"}


def application_trees() -> list[str]:
    packages = [
        path.name
        for path in ROOT.iterdir()
        if (path / "__init__.py").is_file()
        and path.name not in NOT_APPLICATION
        and not path.name.startswith(".")
    ]
    return sorted(packages) + list(ALWAYS)


def application_modules() -> list[Path]:
    found = []
    for tree in application_trees():
        for path in sorted((ROOT / tree).rglob("*.py")):
            parts = path.relative_to(ROOT).parts[:-1]
            if any(part in SKIPPED_DIRS or part.endswith(".egg-info") for part in parts):
                continue
            found.append(path)
    return found
