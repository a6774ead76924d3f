"""Domain errors raised by the service layer and mapped once per adapter.

Each carries the HTTP status that REST answers with; the MCP adapter turns the
same errors into tool errors with the same message.
"""

from __future__ import annotations

import logging

import psycopg
from django.db import DatabaseError

from plumbing import fallbacks

# The REST API's logger: an unexpected error is logged under it, whichever adapter met it.
api_logger = logging.getLogger("agent_doors.api")


class ImpriError(Exception):
    status_code = 400
    code = "error"

    def __init__(self, message: str, *, field: str | None = None):
        super().__init__(message)
        self.message = message
        self.field = field

    def as_dict(self) -> dict:
        body: dict = {"detail": self.message, "code": self.code}
        if self.field:
            body["field"] = self.field
        return body


class InvalidInput(ImpriError):
    status_code = 422
    code = "invalid"

    def __init__(self, field: str, problem: str):
        super().__init__(f"{field}: {problem}", field=field)


class NotAuthenticated(ImpriError):
    status_code = 401
    code = "not_authenticated"


class Forbidden(ImpriError):
    status_code = 403
    code = "forbidden"


class StepUpRequired(Forbidden):
    """An approval of money at or above ``IMPRI_STEP_UP_CENTS`` without a recent second factor."""

    code = "step_up_required"

    def __init__(self, message: str, *, amount_cents: int | None, step_up_cents: int):
        super().__init__(message)
        self.amount_cents = amount_cents
        self.step_up_cents = step_up_cents

    def as_dict(self) -> dict:
        return {
            **super().as_dict(),
            "amount_cents": self.amount_cents,
            "step_up_cents": self.step_up_cents,
        }


class ActionNotFound(ImpriError):
    status_code = 404
    code = "not_found"

    def __init__(self, action_id: str):
        super().__init__(f"no action {action_id!r} is visible to you")


class Conflict(ImpriError):
    status_code = 409
    code = "conflict"


class ActionNotPending(Conflict):
    code = "not_pending"

    def __init__(self, action_id: str, status: str):
        super().__init__(
            f"action {action_id} is {status}, not pending: it can no longer be decided or cancelled"
        )
        self.status = status


class StalePayload(Conflict):
    """An approval that does not name the payload as it now stands: it comes back with the figure."""

    code = "stale_payload"

    def __init__(self, message: str, *, payload: dict, payload_sha256: str):
        super().__init__(message, field="payload_sha256")
        self.payload = payload
        self.payload_sha256 = payload_sha256

    def as_dict(self) -> dict:
        return {**super().as_dict(), "payload": self.payload, "payload_sha256": self.payload_sha256}


class IdempotencyConflict(Conflict):
    code = "idempotency_conflict"


class ResultConflict(Conflict):
    code = "result_conflict"


class RateLimited(ImpriError):
    status_code = 429
    code = "rate_limited"

    def __init__(self, message: str, *, retry_after: int = 60):
        super().__init__(message)
        self.retry_after = max(1, int(retry_after))


# --- The API's error envelope, one for every adapter that answers HTTP -----------------
#
# The REST API's exception handlers (``agent_doors.api``) and the decision long-poll's
# consumer (``waiting.consumers``) both answer through ``answer_to``: the same status,
# body and headers for the same failure.

NOT_AUTHENTICATED = "missing, unknown or revoked key: send Authorization: Bearer <key>"


def not_authenticated() -> NotAuthenticated:
    """The 401 of a request without a valid key."""
    return NotAuthenticated(NOT_AUTHENTICATED)


def answer_to(exc: BaseException, where: str) -> tuple[int, dict, dict[str, str]]:
    """``(status, body, headers)`` answering ``exc``; ``where`` ("GET /path") names it in the log.

    A domain error answers its own status and body; the database away is 503; anything else
    a logged 500. Nothing on the API answers an HTML page.
    """
    if isinstance(exc, ImpriError):
        headers = {"Retry-After": str(exc.retry_after)} if isinstance(exc, RateLimited) else {}
        return exc.status_code, exc.as_dict(), headers
    if isinstance(exc, DatabaseError | psycopg.Error):
        fallbacks.note("database", "the API answers 503", exc)
        body = {"detail": "the database is unavailable; retry shortly", "code": "unavailable"}
        return 503, body, {}
    api_logger.error("unexpected error on %s", where, exc_info=(type(exc), exc, exc.__traceback__))
    return 500, {"detail": "internal error; it was logged", "code": "internal"}, {}
