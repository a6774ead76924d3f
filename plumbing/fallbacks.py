"""Dependencies that failed and were worked around: counted, and logged without flooding.

When Redis is away the rate limiter allows, publishing is skipped (waiters
learn by the hub's re-read) and Celery nudges are dropped (beat delivers).
Each such fallback calls :func:`note`; the counts are what metrics and
``/readyz`` report, and the log gets one warning per component and minute.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter

logger = logging.getLogger("impri.faults")

LOG_EVERY_S = 60.0

_lock = threading.Lock()
counts: Counter[str] = Counter()
_last_logged: dict[str, float] = {}
_last_failed: dict[str, float] = {}


def note(component: str, what: str, exc: BaseException | None = None) -> None:
    """Count one fallback of ``component`` (e.g. ``"cache"``) and log it at most once a minute."""
    now = time.monotonic()
    with _lock:
        counts[component] += 1
        _last_failed[component] = now
        due = now - _last_logged.get(component, -LOG_EVERY_S) >= LOG_EVERY_S
        if due:
            _last_logged[component] = now
    if due:
        logger.warning(
            "%s unavailable, %s (%s); %d times so far",
            component,
            what,
            f"{type(exc).__name__}: {exc}" if exc else "no detail",
            counts[component],
        )


def recent(component: str, within_s: float = 30.0) -> bool:
    """Did ``component`` fail within the last ``within_s`` seconds?"""
    failed = _last_failed.get(component)
    return failed is not None and time.monotonic() - failed < within_s
