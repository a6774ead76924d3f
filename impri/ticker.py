"""The embedded scheduler: the periodic sweeps inside `impri serve`, without Celery beat.

Celery's eager mode cannot schedule, so in embedded mode the serving process
runs the jobs beat sends in scaled mode: the table in ``impri.schedule``, each
job's Celery task called in-process, on the job's loop (one asyncio task per
loop, so state sweeps never wait for delivery and a hanging gateway upstream
delays nothing else). Every job is idempotent. They run in
a worker thread (never on Django's one sync thread, so a slow webhook receiver
can't hold up requests) and publish through the process's channel layer, so
waiters in this process wake as soon as an action expires.
"""

from __future__ import annotations

import asyncio
import logging
import time

from channels.db import database_sync_to_async
from django.conf import settings
from django.utils.module_loading import import_string

from impri import schedule
from impri.schedule import Job

logger = logging.getLogger(__name__)


def jobs_on(loop: str) -> list[Job]:
    """The table's jobs that ``loop`` runs, in the table's order."""
    return [job for job in schedule.JOBS if job.loop == loop]


def due(jobs: list[Job], now: float, next_runs: dict[str, float]) -> list[Job]:
    """The jobs whose time has come (a job at 0 s never runs); each one's next time is set.

    Intervals are read from settings at each tick; a job's first run is
    ``first_after_s`` after the loop's first tick (housekeeping: not during start).
    """
    ready = []
    for job in jobs:
        every = schedule.interval(job, settings)
        if not every:
            next_runs.pop(job.name, None)  # switched off: nothing to wake for
        elif now >= next_runs.setdefault(job.name, now + job.first_after_s):
            ready.append(job)
            next_runs[job.name] = now + every
    return ready


def run_jobs(jobs: list[Job]) -> dict[str, object]:
    """Call each job's Celery task in this process (a task object is callable); by job name."""
    done = {}
    for job in jobs:
        try:
            done[job.name] = import_string(job.task)()
        except Exception:
            logger.exception("job %s failed; it runs again when next due", job.name)
    return done


async def run_loop(loop: str) -> None:
    """Run ``loop``'s jobs when due, in a worker thread; sleep until the next one is."""
    run = database_sync_to_async(run_jobs, thread_sensitive=False)
    jobs = jobs_on(loop)
    next_runs: dict[str, float] = {}
    while True:
        await run(due(jobs, time.monotonic(), next_runs))
        soonest = min(next_runs.values(), default=time.monotonic() + settings.IMPRI_TICK_S)
        await asyncio.sleep(max(0.0, soonest - time.monotonic()))


def install_in_reactor() -> None:
    """Start the ticker when daphne's (asyncio) reactor runs; stop it before shutdown."""
    # deferred: importing Twisted's reactor installs one: serve installs daphne's asyncio reactor first
    from twisted.internet import reactor

    tasks: list[asyncio.Task] = []

    def start() -> None:
        loop = asyncio.get_event_loop()
        tasks.extend(loop.create_task(run_loop(name)) for name in schedule.LOOPS)
        logger.info(
            "embedded ticker: sweeps every %ss (slow ones every %ss)",
            settings.IMPRI_TICK_S,
            settings.IMPRI_SLOW_TICK_S,
        )

    def stop() -> None:
        for task in tasks:
            task.cancel()

    reactor.callWhenRunning(start)
    reactor.addSystemEventTrigger("before", "shutdown", stop)
