"""The wheel's packages, found under the apps pyproject.toml names (``[tool.impri] apps``).

Everything else about the build is in pyproject.toml; this file exists because setuptools'
own discovery cannot add ``impri.templates``: the site-wide ``templates/`` folder, installed
inside ``impri`` (``[tool.setuptools.package-dir]``).
"""

import tomllib
from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).resolve().parent
APPS = tomllib.loads((HERE / "pyproject.toml").read_text())["tool"]["impri"]["apps"]
# Never installed, wherever they sit: the suite, benchmarks, examples, clients and docs.
NOT_SHIPPED = ("tests", "bench", "examples", "clients", "docs", "deploy", "docker", "build")

setup(
    packages=[
        *find_packages(
            where=str(HERE),
            include=[name for app in APPS for name in (app, f"{app}.*")],
            exclude=[
                name
                for folder in NOT_SHIPPED
                for name in (folder, f"{folder}.*", f"*.{folder}", f"*.{folder}.*")
            ],
        ),
        "impri.templates",
    ]
)
