from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import re

from daphne.endpoints import build_endpoint_description_strings
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from approvals import grants, services
from impri import cli, eventloop, preflight, shutdown, storage
from impri import ticker as embedded_ticker


class Command(BaseCommand):
    help = "Migrate the database, then serve HTTP, websockets and the API on daphne."

    def add_arguments(self, parser):
        parser.add_argument("--host", default=settings.IMPRI_HOST)
        parser.add_argument("--port", type=int, default=settings.IMPRI_PORT)
        parser.add_argument(
            "--no-migrate", action="store_true", help="Skip migrations (another process ran them)."
        )
        parser.add_argument(
            "--proxy-headers",
            action="store_true",
            help="Trust X-Forwarded-For/-Proto from a proxy.",
        )
        parser.add_argument(
            "--ticker",
            action=argparse.BooleanOptionalAction,
            default=None,
            help="Run expiry, deliveries and the other periodic sweeps in this process "
            "(default: on in embedded mode, off when Celery beat does it).",
        )

    def handle(
        self, *args, host: str, port: int, no_migrate: bool, proxy_headers: bool, ticker, **options
    ):
        # daphne.server installs the asyncio reactor: first, before anything imports one.
        from daphne.server import Server
        from twisted.internet import reactor

        _tune_gc()
        if not no_migrate:
            call_command("migrate", interactive=False, verbosity=0)
        services.default_group()
        grants.publish_at_start()  # replicas verify each other's grants (approvals/grants.py)
        if settings.CELERY_TASK_ALWAYS_EAGER if ticker is None else ticker:
            embedded_ticker.install_in_reactor()
        # Banners go to stderr with the logs; stdout stays empty (docs/ARCHITECTURE.md).
        listening = Listening(self.stderr, host, port)
        listening.install()
        shutdown.install(reactor)
        # The whole app (every view, the MCP SDK) once the reactor is in, as daphne's CLI does.
        from impri.asgi import application

        proxy = {}
        if proxy_headers:  # what daphne's --proxy-headers sets
            proxy = {
                "proxy_forwarded_address_header": "X-Forwarded-For",
                "proxy_forwarded_port_header": "X-Forwarded-Port",
                "proxy_forwarded_proto_header": "X-Forwarded-Proto",
            }
        server = Server(
            application,
            endpoints=[listen_endpoint(host, port, settings.IMPRI_LISTEN_BACKLOG)],
            # No daphne access log: impri.logs.AccessLog logs each request.
            verbosity=0,
            ready_callable=listening.listened,
            **proxy,
        )
        server.run()
        if not server.listening_addresses:  # daphne logged the failure and stopped
            raise CommandError(listening.could_not_listen(), returncode=2)

    def execute(self, *args, **options):
        self.preflight()  # before the system checks: one of them reads the database
        return super().execute(*args, **options)

    def preflight(self) -> None:
        """Wait for the database (one line a try, then exit 1); warn of what runs degraded."""
        timeout = settings.IMPRI_DB_WAIT_S
        error = preflight.wait_for("database", preflight.database_error, timeout, self.stderr.write)
        if error is not None:
            raise CommandError(preflight.unreachable("database", timeout, error))
        for warning in preflight.start_warnings():
            self.stderr.write(f"impri: warning: {warning}")


class Listening(logging.Filter):
    """Say "listening" once the socket is bound, and say what to do when it cannot be.

    Daphne logs its own start-up at INFO ("Starting server at", "HTTP/2 support not
    enabled", "Configuring endpoint"...), and a port in use as a CRITICAL line: below
    IMPRI_LOG_LEVEL=DEBUG its INFO lines are dropped, and the port's error names the fix
    instead. The banner is printed by daphne's ``ready_callable``, once its endpoints
    have been set listening.
    """

    def __init__(self, stderr, host: str, port: int):
        super().__init__()
        self.stderr, self.host, self.port = stderr, host, port
        self.reason = ""

    def install(self) -> None:
        daphne_log = logging.getLogger("daphne")
        if logging.getLogger().getEffectiveLevel() > logging.DEBUG:
            daphne_log.setLevel(logging.WARNING)
        logging.getLogger("daphne.server").addFilter(self)

    def filter(self, record: logging.LogRecord) -> bool:
        """daphne's "Listen failure: ..." line: its reason goes into our message, not the log."""
        if record.getMessage().startswith("Listen failure: "):
            self.reason = record.getMessage().removeprefix("Listen failure: ")
            return False
        return True

    def listened(self) -> None:
        loop = eventloop.name_of(asyncio.get_event_loop())  # daphne's, set before it is ready
        self.stderr.write(f"Impri {cli.version()}: {storage.describe()}; event loop {loop}")
        self.stderr.write(
            f"Impri is listening on http://{self.host}:{self.port}/ "
            "(inbox at /inbox/, API at /api/v1/)"
        )
        self.stderr.flush()

    def could_not_listen(self) -> str:
        # Twisted's "Couldn't listen on host:port: [Errno 98] Address already in use."
        found = re.search(r"\[Errno \d+\] (.*?)\.?$", self.reason)
        reason = found.group(1) if found else self.reason or "daphne could not listen"
        return (
            f"cannot listen on {self.host}:{self.port} ({reason}). Choose "
            f"another port with --port {self.port + 1} or IMPRI_PORT={self.port + 1}"
            ", or stop what is using it."
        )


def listen_endpoint(host: str, port: int, backlog: int) -> str:
    """Daphne's endpoint for ``-b host -p port``, with a listen queue of ``backlog``.

    Daphne's ``-b``/``-p`` listen with Twisted's default queue of 50 connections: a burst
    of agents (a fleet restarting, thousands of long-polls reconnecting) overflows it and
    the kernel drops their connection attempts until SYN retries land seconds later.
    """
    (endpoint,) = build_endpoint_description_strings(host=host, port=port)
    return f"{endpoint}:backlog={backlog}"


def _tune_gc() -> None:
    """Full garbage collections a hundred times rarer; the young generations as they are.

    Each open wait keeps a few hundred objects alive (daphne's request, Django's, the
    coroutines, the future), and CPython 3.11's full collection walks every one of them:
    with 2,000 waits open it paused the process for 130–450 ms several times a minute,
    which was most of the wake-latency tail. After 1,000 young-generation passes instead
    of 10 they are a hundred times rarer; cyclic garbage waits longer to be freed (about
    20 % more RSS with 2,000 waits open). Measured in docs/benchmarks.md.
    """
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, settings.IMPRI_GC_FULL_EVERY)
