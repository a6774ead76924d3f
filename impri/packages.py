"""Impri's apps keep the design card's plain names (``approvals``, ``rules``, ``audit``,
``inbox``, ``gateway``), so another distribution with a package of the same name (django-rules
installs ``rules``) could shadow one or be mixed into it. Settings check this before Django
loads any app, and fail naming the package, instead of running someone else's code.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

# A file only Impri's package has, per package; and files only a known namesake has.
MARKERS = {
    "approvals": "services/pushing.py",
    "rules": "engine.py",
    "audit": "canonical.py",
    "inbox": "presenters.py",
    "gateway": "proxy.py",
    "slackapp": "decisions.py",
    "twofactor": "middleware.py",
}
NAMESAKES = {("rules", "predicates.py"): "django-rules", ("rules", "rulesets.py"): "django-rules"}


def _folder(package: str) -> Path | None:
    """The folder Python imports ``package`` from (without importing it)."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin:
        return None
    return Path(spec.origin).parent


def check() -> None:
    for package, marker in MARKERS.items():
        folder = _folder(package)
        if folder is None or not (folder / marker).is_file():
            raise ImproperlyConfigured(
                f"the package {package!r} on sys.path is not Impri's (no {marker} in "
                f"{folder}): another distribution with that name shadows it. Install Impri "
                "in its own virtualenv."
            )
    for (package, name), distribution in NAMESAKES.items():
        folder = _folder(package)
        if folder is not None and (folder / name).is_file():
            raise ImproperlyConfigured(
                f"{distribution} is installed into the same {package!r} package as Impri "
                f"({folder / name} exists): the two overwrite each other's files. Install "
                "Impri in its own virtualenv."
            )
