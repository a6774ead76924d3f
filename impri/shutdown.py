"""A graceful SIGTERM for ``impri serve`` (``docker stop``, Kubernetes, systemd).

Open long-polls would otherwise keep daphne waiting for as long as they were
asked to wait, until the orchestrator's SIGKILL. Instead, on the first SIGTERM
(or SIGINT) every open wait of the process answers at once with its current
state, ``pending`` unless it was just decided, so the agent calls again (on
another process, or on this one once it is back); the reactor stops when
those answers are out, or after ``GRACE_S`` at the latest. A second signal
stops at once.

"Out" is counted, not guessed: ``impri.logs.AccessLog`` counts the HTTP requests
in progress (:func:`request_started`, :func:`request_finished`), and the reactor
stops once no wait is open and every request has sent its last byte to Twisted,
however loaded the machine is (a fixed pause after the waits were woken cut MCP
answers that were still being serialized).

After a graceful stop the process skips the interpreter's own teardown (about
0.7 s of freeing every module and object of a server that held thousands of
waits): the exit handlers registered since start-up run, the logs are flushed,
and the process exits 0.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import signal
import sys
import time

logger = logging.getLogger(__name__)

GRACE_S = 5.0  # below docker stop's 10 s; a loaded 2-core host answers 40 long-polls in about 2 s
# The last answers are handed to Twisted when the count reaches 0; the reactor's stop then drops
# every connection unflushed. 0.1 s lost an MCP answer's last bytes on a loaded 2-core host.
FLUSH_S = 0.5
_requests = 0


def request_started() -> None:
    global _requests
    _requests += 1


def request_finished() -> None:
    global _requests
    _requests -= 1


def requests_in_progress() -> int:
    return _requests


_stopped_gracefully = False


def install(reactor) -> None:
    """Call before ``reactor.run``: our handlers replace Twisted's once it runs."""
    reactor.callWhenRunning(_take_signals, reactor)
    atexit.register(_exit_now_if_stopped)  # runs after the handlers registered later


def _exit_now_if_stopped() -> None:
    if not _stopped_gracefully:
        return
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(0)


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
    # deferred: impri.logs imports this module in every process, beat too, which loads no model (tests/project/test_beat.py)
    from waiting import hub as waiting

    woken = waiting.shutdown()
    logger.warning(
        "%s: answering %d open waits with their current state, then stopping", name, woken
    )
    deadline = time.monotonic() + GRACE_S

    def check() -> None:
        answered = waiting.waiting() == 0 and _requests <= 0
        if answered or time.monotonic() >= deadline:
            if not answered:
                logger.warning(
                    "%s: stopping with %d waits and %d requests still open after %.1f s",
                    name,
                    waiting.waiting(),
                    _requests,
                    GRACE_S,
                )
            reactor.callLater(FLUSH_S, _stop, reactor)  # let the last answers reach their sockets
        else:
            reactor.callLater(0.05, check)

    check()


def _stop(reactor) -> None:
    global _stopped_gracefully
    _stopped_gracefully = True
    if reactor.running:
        reactor.stop()
