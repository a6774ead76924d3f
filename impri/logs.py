"""Logging: plain or JSON lines on stderr, a request id and duration per HTTP request.

``IMPRI_LOG_FORMAT=json`` writes one JSON object per line (``ts``, ``level``,
``logger``, ``message``, plus ``request_id`` inside a request and whatever a
caller passed in ``extra``). Every HTTP request gets an id (the client's
``X-Request-ID`` when it is a sane token, else a fresh one), echoed in the
response's ``X-Request-ID`` header and carried by every record logged while
the request runs; ``impri.access`` logs one line per request with its method,
path, status and duration.
"""

from __future__ import annotations

import contextvars
import json
import logging
import re
import secrets
import time
from datetime import UTC, datetime

from impri import shutdown

request_id_var: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "impri_request_id", default=None
)
access_logger = logging.getLogger("impri.access")

# What a client may choose as its request id: short, printable, no separators to forge log lines.
_CLIENT_ID = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")
_PROBES = ("/healthz", "/readyz")
# LogRecord's own attributes: everything else on a record came from ``extra``.
_RECORD_FIELDS = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "request_id"}


class RequestIdFilter(logging.Filter):
    """Put the current request's id (or ``-``) on every record as ``record.request_id``."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "request_id"):
            record.request_id = request_id_var.get() or "-"
        return True


class NoTraceback(logging.Filter):
    """Keep the message, drop the traceback: for expected refusals such as a disallowed host."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.exc_info = None
        record.exc_text = None
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line; ``extra`` fields become keys of their own."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        request_id = getattr(record, "request_id", "-")
        if request_id != "-":
            entry["request_id"] = request_id
        for key, value in vars(record).items():
            if key not in _RECORD_FIELDS and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["exc_info"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


class PlainFormatter(logging.Formatter):
    """The classic line, with the request id when there is one."""

    def __init__(self):
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        request_id = getattr(record, "request_id", "-")
        return line if request_id == "-" else f"{line} [request_id={request_id}]"


def logging_config(log_format: str, level: str) -> dict:
    """The ``LOGGING`` dict: one stderr handler, quiet third-party chatter at INFO."""
    formatter = {"()": JsonFormatter} if log_format == "json" else {"()": PlainFormatter}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {
            "request_id": {"()": RequestIdFilter},
            "no_traceback": {"()": NoTraceback},
        },
        "formatters": {"impri": formatter},
        "handlers": {
            "console": {
                "class": "logging.StreamHandler",
                "stream": "ext://sys.stderr",
                "formatter": "impri",
                "filters": ["request_id"],
            }
        },
        "root": {"handlers": ["console"], "level": level},
        "loggers": {
            "django.db.backends": {"level": "INFO"},
            # A request for a host name that isn't ours is routine on the internet: one line.
            "django.security.DisallowedHost": {"level": "WARNING", "filters": ["no_traceback"]},
            # The MCP SDK logs every stateless request at INFO.
            "mcp.server.streamable_http": {"level": "WARNING"},
            # Celery at INFO: a line per task received, succeeded and sent every tick.
            "celery.app.trace": {"level": "WARNING"},
            "celery.worker.strategy": {"level": "WARNING"},
            "celery.beat": {"level": "WARNING"},
            # django-axes logs every failed login at INFO; lockouts are audited.
            "axes": {"level": "WARNING"},
        },
    }


def _request_id(scope) -> str:
    for name, value in scope.get("headers", []):
        if name == b"x-request-id":
            candidate = value.decode("latin-1")
            if _CLIENT_ID.fullmatch(candidate):
                return candidate
    return secrets.token_hex(8)


class AccessLog:
    """ASGI middleware: a request id for every HTTP request and one log line when it ends."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        request_id = _request_id(scope)
        token = request_id_var.set(request_id)
        started = time.monotonic()
        status = 0
        shutdown.request_started()  # SIGTERM stops once every answer is out (impri/shutdown.py)

        async def send_with_id(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = [h for h in message.get("headers", []) if h[0].lower() != b"x-request-id"]
                message = {**message, "headers": [*headers, (b"x-request-id", request_id.encode())]}
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            shutdown.request_finished()
            duration_ms = round((time.monotonic() - started) * 1000, 1)
            client = scope.get("client") or ("-", 0)
            # Probes every few seconds would drown the log: they show at DEBUG unless they fail.
            quiet = scope["path"] in _PROBES and status == 200
            access_logger.log(
                logging.DEBUG if quiet else logging.INFO,
                '%s "%s %s" %s %sms',
                client[0],
                scope["method"],
                scope["path"],
                status or "-",
                duration_ms,
                extra={
                    "method": scope["method"],
                    "path": scope["path"],
                    "status": status,
                    "duration_ms": duration_ms,
                    "client": client[0],
                },
            )
            request_id_var.reset(token)
