"""A graceful SIGTERM for ``impri serve`` (``docker stop``, Kubernetes, systemd).

Open long-polls would otherwise keep daphne waiting for as long as they were
asked to wait, until the orchestrator's SIGKILL. Instead, on the first SIGTERM
(or SIGINT) every open wait of the process answers at once with its current
state, ``pending`` unless it was just decided, so the agent calls again (on
another process, or on this one once it is back); the reactor stops when
those answers are out, or after ``GRACE_S`` at the latest. A second signal
stops at once.
"""

from __future__ import annotations

import logging
import signal
import time

logger = logging.getLogger(__name__)

GRACE_S = 2.0
FLUSH_S = 0.2


def install(reactor) -> None:
    """Call before ``reactor.run``: our handlers replace Twisted's once it runs."""
    reactor.callWhenRunning(_take_signals, reactor)


def _take_signals(reactor) -> None:
    state = {"stopping": False}

    def on_signal(signum, frame):
        if state["stopping"]:
            reactor.callFromThread(_stop, reactor)
            return
        state["stopping"] = True
        reactor.callFromThread(_begin, reactor, signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)


def _begin(reactor, name: str) -> None:
    from approvals.services import waiting

    woken = waiting.shutdown()
    logger.warning(
        "%s: answering %d open waits with their current state, then stopping", name, woken
    )
    deadline = time.monotonic() + GRACE_S

    def check() -> None:
        if waiting.waiting() == 0 or time.monotonic() >= deadline:
            reactor.callLater(FLUSH_S, _stop, reactor)  # let the last answers reach their sockets
        else:
            reactor.callLater(0.05, check)

    check()


def _stop(reactor) -> None:
    if reactor.running:
        reactor.stop()
