"""Racing real threads against a real database."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from django.db import connection


def run_together(calls: list) -> list:
    """Start every call at the same instant, each on its own thread and DB connection."""
    barrier = threading.Barrier(len(calls))

    def run(call):
        try:
            barrier.wait()
            return call()
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=len(calls)) as pool:
        return list(pool.map(run, calls))
