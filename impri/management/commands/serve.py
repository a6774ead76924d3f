from __future__ import annotations

import argparse
import gc
import logging

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

import compat.daphne
from approvals import grants, services
from impri import cli, eventloop, preflight, storage


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
        import daphne.server  # noqa: F401  (installs the asyncio reactor before anything imports one)
        from daphne.cli import CommandLineInterface
        from twisted.internet import reactor

        from impri import shutdown
        from impri import ticker as embedded_ticker

        _tune_gc()
        if not no_migrate:
            call_command("migrate", interactive=False, verbosity=0)
        services.default_group()
        grants.publish_at_start()  # replicas verify each other's grants (approvals/grants.py)
        if settings.CELERY_TASK_ALWAYS_EAGER if ticker is None else ticker:
            embedded_ticker.install_in_reactor()
        # Banners go to stderr with the logs; stdout stays empty (docs/ARCHITECTURE.md).
        loop = eventloop.name_of(compat.daphne.twisted_loop())
        listening = Listening(
            self.stderr,
            [
                f"Impri {cli.version()}: {storage.describe()}; event loop {loop}",
                f"Impri is listening on http://{host}:{port}/ (inbox at /inbox/, API at /api/v1/)",
            ],
            host,
            port,
        )
        listening.install()
        shutdown.install(reactor)
        # Daphne's command line puts "." first on sys.path and imports the application: the
        # application is imported here first, and "." dropped as soon as the server runs.
        from impri import asgi  # noqa: F401

        reactor.callWhenRunning(cli.drop_working_directory)
        # -v 0: no daphne access log on stdout; impri.logs.AccessLog logs each request.
        daphne_args = ["-v", "0", "-e", listen_endpoint(host, port, settings.IMPRI_LISTEN_BACKLOG)]
        if proxy_headers:
            daphne_args.append("--proxy-headers")
        try:
            CommandLineInterface().run([*daphne_args, "impri.asgi:application"])
        except SystemExit:  # daphne's exit(1) when it could not listen
            if not listening.failed:
                raise
        if listening.failed:
            raise CommandError(listening.failed, returncode=2)

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


class Listening:
    """Say "listening" once the socket is bound, and say what to do when it cannot be.

    Daphne logs its own start-up at INFO ("Starting server at", "HTTP/2 support not
    enabled", "Configuring endpoint"...), and a port in use as a CRITICAL line: below IMPRI_LOG_LEVEL=DEBUG
    its INFO lines are dropped, and the port's error names the fix instead.
    """

    def __init__(self, stderr, banner: list[str], host: str, port: int):
        self.stderr, self.banner, self.host, self.port = stderr, banner, host, port
        self.failed = ""

    def install(self) -> None:
        daphne_log = logging.getLogger("daphne")
        if logging.getLogger().getEffectiveLevel() > logging.DEBUG:
            daphne_log.setLevel(logging.WARNING)
        compat.daphne.on_listen(self.listened, self.could_not_listen)
        compat.daphne.light_input_queues()  # about 3 KB less a waiting agent (issue 34)

    def listened(self) -> None:
        for line in self.banner:
            self.stderr.write(line)
        self.stderr.flush()

    def could_not_listen(self, failure) -> None:
        from twisted.internet.error import CannotListenError

        reason = failure.getErrorMessage()
        if isinstance(failure.value, CannotListenError) and isinstance(
            failure.value.socketError, OSError
        ):
            reason = failure.value.socketError.strerror or reason
        self.failed = (
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
    from daphne.endpoints import build_endpoint_description_strings

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
