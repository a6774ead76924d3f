"""Every use of a third-party library's private API, one module per upstream.

Each module holds the override itself (a copied method, a replaced attribute, a
private hook), says in its docstring what it overrides, why, what it was
measured to buy, and exposes ``WRITTEN_FOR``: the distributions and version
series it was read against. ``tests/project/test_compat.py`` fails when an installed
version leaves that series, naming the code to re-read before moving the pin.

These modules import the standard library and third-party code only, never
Impri's apps: they sit below everything else.
"""

from __future__ import annotations

from importlib.metadata import version


def series(spec: str, installed: str) -> bool:
    """Whether ``installed`` is in the series ``spec`` names: ``"5.2"`` takes 5.2.x only."""
    wanted = spec.split(".")
    return installed.split(".")[: len(wanted)] == wanted


def out_of_series(written_for: dict[str, str]) -> dict[str, str]:
    """``{distribution: installed version}`` for each one outside its pinned series."""
    found = {name: version(name) for name in written_for}
    return {name: v for name, v in found.items() if not series(written_for[name], v)}


def source_digest(target: str) -> str:
    """The SHA-256 (first 16 hex digits) of the installed source of ``module:qualname``."""
    import hashlib
    import importlib
    import inspect

    module_name, _, qualname = target.partition(":")
    found = importlib.import_module(module_name)
    for part in qualname.split("."):
        found = getattr(found, part)
    return hashlib.sha256(inspect.getsource(found).encode()).hexdigest()[:16]
