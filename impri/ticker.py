"""The embedded scheduler: the periodic sweeps inside `impri serve`, without Celery beat.

Celery's eager mode cannot schedule, so in embedded mode the serving process
runs the same idempotent sweeps that beat triggers in scaled mode. They run in
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

logger = logging.getLogger(__name__)


def state_sweeps():
    """Deadlines that change an action's state: quick database work, never network I/O."""
    from approvals import services

    return [services.expire_due]


def slow_sweeps():
    from approvals import services
    from audit import log as audit_log

    return [
        services.escalate_due,
        services.remind_due,
        services.flag_stale,
        audit_log.run_full_verifications,
    ]


def housekeeping(now: float, next_runs: dict[str, float]) -> list:
    """What is due of the hourly prune and the periodic audit verify (the beat schedule's twins)."""
    from audit import verification
    from delivery import retention

    every = {
        "prune": (retention.prune, settings.IMPRI_HOUSEKEEPING_EVERY_S),
        "verify": (verification.verify_scheduled, settings.IMPRI_AUDIT_VERIFY_EVERY_S),
    }
    due = []
    for name, (sweep, period) in every.items():
        # The first run a minute after start, not during it.
        if period and now >= next_runs.setdefault(name, now + 60):
            due.append(sweep)
            next_runs[name] = now + period
    return due


def delivery_sweeps():
    """Hand due webhooks and notifications to their lanes' threads (delivery.lanes).

    Each returns at once: the network I/O runs on the lanes, webhooks and
    notifications apart, so neither a dead receiver nor the other lane delays a sweep.
    """
    from delivery import notices, webhooks
    from slackapp import delivery as slack
    from webpush import delivery as push

    return [webhooks.LANE.sweeper, notices.LANE.sweeper, slack.LANE.sweeper, push.LANE.sweeper]


def run_sweeps(sweeps) -> dict[str, int]:
    done = {}
    for sweep in sweeps:
        try:
            done[sweep.__qualname__] = sweep()
        except Exception:
            logger.exception("sweep %s failed; it runs again on the next tick", sweep.__qualname__)
    return done


async def run_state_loop() -> None:
    run = database_sync_to_async(run_sweeps, thread_sensitive=False)
    next_slow = 0.0
    while True:
        started = time.monotonic()
        await run(state_sweeps())
        if started >= next_slow:
            await run(slow_sweeps())
            next_slow = started + settings.IMPRI_SLOW_TICK_S
        await asyncio.sleep(max(0.0, settings.IMPRI_TICK_S - (time.monotonic() - started)))


async def run_delivery_loop() -> None:
    run = database_sync_to_async(run_sweeps, thread_sensitive=False)
    next_runs: dict[str, float] = {}
    while True:
        started = time.monotonic()
        # Housekeeping shares this loop, not the state loop: a long verify must never delay expiry.
        await run(delivery_sweeps() + housekeeping(started, next_runs))
        await asyncio.sleep(max(0.0, settings.IMPRI_TICK_S - (time.monotonic() - started)))


async def run_gateway_loop() -> None:
    """Gateway upstreams' tool lists, refreshed when due (gateway.tasks.refresh_due).

    A loop of its own: an upstream that hangs must delay neither an expiry nor
    a delivery.
    """
    from gateway.tasks import refresh_due

    run = database_sync_to_async(run_sweeps, thread_sensitive=False)
    while True:
        started = time.monotonic()
        await run([refresh_due])
        await asyncio.sleep(max(0.0, settings.IMPRI_SLOW_TICK_S - (time.monotonic() - started)))


def install_in_reactor() -> None:
    """Start the ticker when daphne's (asyncio) reactor runs; stop it before shutdown."""
    from twisted.internet import reactor

    tasks: list[asyncio.Task] = []

    def start() -> None:
        loop = asyncio.get_event_loop()
        tasks.extend(
            [
                loop.create_task(run_state_loop()),
                loop.create_task(run_delivery_loop()),
                loop.create_task(run_gateway_loop()),
            ]
        )
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
