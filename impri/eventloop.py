"""The event loop that ``impri serve`` runs on: uvloop where it is installed, else asyncio's.

Every request of the API passes through the server's one event loop several
times (the HTTP parse, the key check and the view's hops to the database pool
and back, the response), and with thousands of long-polls waiting it also
carries every wake-up. uvloop runs the same asyncio code on libuv, with its
callbacks, futures and thread-safe wake-ups written in C, so the loop's share
of a push costs less (``docs/benchmarks.md`` has the paired runs).

Daphne builds its loop (Twisted's asyncio reactor) when Django loads the
``daphne`` app, long before a management command runs, so the loop is chosen
first thing: ``impri.cli`` and ``manage.py`` call ``choose()`` before the
settings load. Only the server's loop changes; other commands, the worker and
tests keep asyncio's own.

``IMPRI_EVENT_LOOP``: ``auto`` (the default: uvloop if it can be imported),
``uvloop`` (refuse to start without it) or ``asyncio``.
"""

from __future__ import annotations

import asyncio

from impri.settings_env import env

CHOICES = ("auto", "uvloop", "asyncio")


class Unavailable(Exception):
    """The event loop asked for can't be had; the message says why, naming the variable."""


def choose(command: str | None) -> str:
    """Set the event loop policy for ``command`` and return the loop's name."""
    wanted = env("IMPRI_EVENT_LOOP").strip().lower() or "auto"
    if wanted not in CHOICES:
        raise Unavailable(f"IMPRI_EVENT_LOOP must be one of {', '.join(CHOICES)}, not {wanted!r}")
    if command != "serve" or wanted == "asyncio":
        return "asyncio"
    try:
        # deferred: optional (none on Windows or PyPy), and only serve runs on it
        import uvloop
    except ImportError:
        if wanted == "uvloop":
            raise Unavailable(
                "IMPRI_EVENT_LOOP=uvloop but uvloop is not installed (pip install uvloop)"
            ) from None
        return "asyncio"
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    return "uvloop"


def name_of(loop: asyncio.AbstractEventLoop) -> str:
    """``uvloop`` or ``asyncio``: what a running loop really is (for the start-up banner)."""
    return type(loop).__module__.split(".")[0]
