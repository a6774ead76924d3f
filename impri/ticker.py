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

    return [services.escalate_due, services.remind_due, services.flag_stale]


def delivery_sweeps():
    """Network I/O (webhooks, email, Slack): in a loop of its own, so a dead receiver never delays expiry."""
    from approvals import notify, webhooks
    from gateway.tasks import refresh_due

    return [webhooks.deliver_due, notify.send_due, refresh_due]


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
    while True:
        started = time.monotonic()
        await run(delivery_sweeps())
        await asyncio.sleep(max(0.0, settings.IMPRI_TICK_S - (time.monotonic() - started)))


def install_in_reactor() -> None:
    """Start the ticker when daphne's (asyncio) reactor runs; stop it before shutdown."""
    from twisted.internet import reactor

    tasks: list[asyncio.Task] = []

    def start() -> None:
        loop = asyncio.get_event_loop()
        tasks.extend([loop.create_task(run_state_loop()), loop.create_task(run_delivery_loop())])
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
