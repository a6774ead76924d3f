"""What each framework override saves of a push's CPU, measured in process (not a test).

    python bench/overrides.py

``bench/pushes.py`` measures the serve process's CPU per push (~5 ms at 16 clients), but
on a shared 2-core VM its runs move by ±10 %, too much to tell whether an override saves
5 % of it. So this script times, with the process's CPU clock, each piece of per-request
work an override skips or replaces, with and without it:

- Twisted's parse of the request's Content-Type (``twisted.web.http._parseContentType``,
  once per request with a body), and the same behind an LRU cache;
- Twisted's combined-log line (``HTTPFactory.log``) written to Twisted's log file with
  no observer, as daphne ``-v 0`` leaves it;
- the request signals (``request_started``, ``request_finished``) sent through
  ``sync_to_async`` as Django's ``ASGIHandler.handle`` does, and on the loop as
  ``compat.django.LoopSignalsASGIHandler`` does, with the receivers the app connects.

Divide by the serve CPU per push that ``bench/pushes.py`` reports (docs/benchmarks.md,
"Framework overrides").
"""

from __future__ import annotations

import asyncio
import functools
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "impri.settings")
os.environ.setdefault("IMPRI_DATA_DIR", tempfile.mkdtemp(prefix="impri-bench-"))


def per_call_us(fn, n: int) -> float:
    started = time.process_time()
    for _ in range(n):
        fn()
    return (time.process_time() - started) / n * 1e6


def content_type() -> tuple[float, float]:
    from twisted.web import http

    parse = getattr(http._parseContentType, "__wrapped__", http._parseContentType)
    cached = functools.lru_cache(maxsize=64)(parse)
    header = b"application/json"
    return per_call_us(lambda: parse(header), 20_000), per_call_us(lambda: cached(header), 20_000)


def access_line() -> float:
    from daphne.http_protocol import HTTPFactory
    from twisted.logger import globalLogBeginner
    from twisted.python import log
    from twisted.web import http
    from twisted.web.test.requesthelper import DummyChannel

    globalLogBeginner.beginLoggingTo([lambda _: None], redirectStandardIO=False)  # daphne -v 0
    factory = HTTPFactory.__new__(HTTPFactory)
    http.HTTPFactory.__init__(factory)
    factory.logFile = log.logfile  # what startFactory sets without a log path
    factory._updateLogDateTime()
    request = http.Request(DummyChannel(), False)
    request.method, request.uri, request.clientproto = b"POST", b"/api/v1/actions", b"HTTP/1.1"
    request.code, request.sentLength = 201, 300
    return per_call_us(lambda: http.HTTPFactory.log(factory, request), 20_000)


async def request_signals(n: int = 5_000) -> tuple[float, float]:
    from django.core import signals

    started = time.process_time()
    for _ in range(n):  # Django's handle
        await signals.request_started.asend(sender=None, scope={"type": "http"})
        await signals.request_finished.asend(sender=None)
    threads = (time.process_time() - started) / n * 1e6
    started = time.process_time()
    for _ in range(n):  # compat.django's copy
        signals.request_started.send(sender=None, scope={"type": "http"})
        signals.request_finished.send(sender=None)
    return threads, (time.process_time() - started) / n * 1e6


def main() -> None:
    import django

    django.setup()
    import impri.asgi  # noqa: F401  (connects the served application's receivers)

    parse, cached = content_type()
    threads, loop = asyncio.run(request_signals())
    print("| per request | without the override | with it | saved |")
    print("|---|---:|---:|---:|")
    print(
        f"| Content-Type parse | {parse:.1f} µs | {cached:.2f} µs (cached) | {parse - cached:.1f} µs |"
    )
    line = access_line()
    print(f"| Twisted's access line | {line:.1f} µs | 0 (skipped) | {line:.1f} µs |")
    print(
        f"| request signals | {threads:.0f} µs (2 hops) | {loop:.0f} µs (loop) | {threads - loop:.0f} µs |"
    )


if __name__ == "__main__":
    main()
