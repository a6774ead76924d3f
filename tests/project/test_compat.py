"""Every override of a library's private API is pinned to the versions it was read against.

``compat/`` holds each use of a third-party private API, one module per upstream. Each
module says which distributions (``WRITTEN_FOR``, a version series) and which upstream
functions (``UPSTREAM``, the digest of their source) it was written against. An upgrade
that leaves a series, or changes one of those functions even in a patch release, fails
here: re-read the override against the new code (its docstring says what to read), then
move the pin. (That compat imports none of our packages is tests/project/test_layers.py's:
it is the lowest floor.)
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import sys
from importlib.metadata import version

import pytest

import compat

MODULES = sorted(info.name for info in pkgutil.iter_modules(compat.__path__))


def test_every_upstream_has_its_module():
    expected = {"asgiref", "daphne", "django", "httpx", "mozilla_django_oidc", "ninja"}
    assert expected <= set(MODULES), MODULES


@pytest.mark.parametrize("name", MODULES)
def test_the_installed_versions_are_the_ones_the_overrides_were_written_for(name):
    module = importlib.import_module(f"compat.{name}")
    assert module.WRITTEN_FOR, f"compat/{name}.py pins no version"
    for distribution, spec in module.WRITTEN_FOR.items():
        installed = version(distribution)
        assert compat.series(spec, installed), (
            f"{distribution} {installed} is installed, but compat/{name}.py was written for "
            f"{spec}.x: re-read the upstream code its docstring names against {installed}, "
            f"then move WRITTEN_FOR"
        )


@pytest.mark.parametrize("name", MODULES)
def test_the_upstream_code_is_the_code_the_overrides_were_read_against(name):
    module = importlib.import_module(f"compat.{name}")
    changed = {
        target: compat.source_digest(target)
        for target, digest in module.UPSTREAM.items()
        if compat.source_digest(target) != digest
    }
    assert not changed, (
        f"upstream code that compat/{name}.py copies, calls or replaces has changed: {changed}. "
        f"Re-read the override against it, then record the new digests in UPSTREAM"
    )


def test_a_version_outside_the_series_is_refused():
    assert compat.series("5.2", "5.2.19")
    assert compat.series("0.29", "0.29.0")
    assert not compat.series("5.2", "5.3.0")
    assert not compat.series("5.2", "6.0")
    assert not compat.series("0.29", "0.30.1")
    assert not compat.series("26.10", "26.1.0")
    assert compat.out_of_series({"django": "1.0"}) == {"django": version("django")}


def test_a_changed_upstream_function_changes_its_digest(tmp_path, monkeypatch):
    source = tmp_path / "upstream_sample.py"
    source.write_text("def f():\n    return 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    before = compat.source_digest("upstream_sample:f")
    source.write_text("def f():\n    return 2\n")
    sys.modules.pop("upstream_sample", None)
    assert compat.source_digest("upstream_sample:f") != before


def test_the_asgi_handlers_copy_still_sends_what_djangos_sends_through_threads():
    """``LoopSignalsASGIHandler.handle`` sends the request signals on the loop.

    Sent there, a coroutine receiver would fail every API request (``Signal.send`` runs
    it through ``async_to_sync``, which refuses to run on a loop), so theirs must all be
    sync. And the copy differs from Django's only where Django awaits the signals.
    """
    from django.core import signals
    from django.core.handlers.asgi import ASGIHandler

    import impri.asgi  # connects whatever the served application connects
    from compat.django import LoopSignalsASGIHandler

    assert "request_started.asend" in inspect.getsource(ASGIHandler.handle)
    assert "request_started.asend" not in inspect.getsource(LoopSignalsASGIHandler.handle)
    for signal in (signals.request_started, signals.request_finished):
        sync_receivers, async_receivers = signal._live_receivers(impri.asgi.ApiASGIHandler)
        assert sync_receivers and not async_receivers, (signal, async_receivers)
