"""Waiting in tests for state something else changes: a liveness bound, never a timing."""

from __future__ import annotations

import asyncio
import time


async def until(predicate, timeout: float = 5.0) -> None:
    """Until ``predicate()`` is true; fails after ``timeout`` seconds (a loaded CI machine is slow)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out waiting for the condition"
        await asyncio.sleep(0.01)
