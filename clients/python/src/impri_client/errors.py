"""Typed errors: one class per HTTP answer an agent must tell apart, and per outcome."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .types import Decision

__all__ = [
    "ActionCancelled",
    "ActionExpired",
    "ActionNotApproved",
    "ActionRejected",
    "AlreadySettled",
    "ChangesRequested",
    "ApiError",
    "AuthenticationError",
    "BadRequest",
    "Conflict",
    "DecisionTimeout",
    "ImpriError",
    "NotFound",
    "PayloadTooLarge",
    "PermissionDenied",
    "RateLimited",
    "ResultNotReported",
    "ServerError",
    "ServiceUnavailable",
    "ValidationError",
]


class ImpriError(Exception):
    """Base class of everything this client raises on purpose."""


class ApiError(ImpriError):
    """Impri answered with an error status. ``detail`` is its message, ``code`` its code."""

    status_code: int = 0

    def __init__(self, status_code: int, body: Any):
        self.status_code = status_code
        self.body = body if isinstance(body, dict) else {"detail": str(body)}
        self.detail: str = str(self.body.get("detail") or f"HTTP {status_code}")
        self.code: str | None = self.body.get("code")
        self.field: str | None = self.body.get("field")
        super().__init__(f"{status_code}: {self.detail}")


class BadRequest(ApiError):
    """400: the body was not JSON."""


class AuthenticationError(ApiError):
    """401: no key, an unknown or revoked key, or a disabled agent."""


class PermissionDenied(ApiError):
    """403: the key may not do this (another agent's action, a reviewer token as an agent)."""


class NotFound(ApiError):
    """404: no such action (or not one this key can see)."""


class Conflict(ApiError):
    """409: the action is not in a state that allows this, or a key/grant was reused."""


class PayloadTooLarge(ApiError):
    """413: the body is larger than the server's IMPRI_MAX_BODY_BYTES."""


class ValidationError(ApiError):
    """422: invalid input. ``field`` names it (``payload``, ``editable``, ``preview.format``…)."""

    @property
    def errors(self) -> list[dict]:
        """Every problem the server listed, as ``{"field", "message"}``."""
        return list(self.body.get("errors") or [{"field": self.field, "message": self.detail}])


class RateLimited(ApiError):
    """429: too many requests a minute with this key."""


class ServerError(ApiError):
    """5xx: a fault on the server's side."""


class ServiceUnavailable(ServerError):
    """503: the database is unavailable for a moment; retry."""


_BY_STATUS: dict[int, type[ApiError]] = {
    400: BadRequest,
    401: AuthenticationError,
    403: PermissionDenied,
    404: NotFound,
    409: Conflict,
    413: PayloadTooLarge,
    422: ValidationError,
    429: RateLimited,
    503: ServiceUnavailable,
}


def error_for(status_code: int, body: Any) -> ApiError:
    cls = _BY_STATUS.get(status_code) or (ServerError if status_code >= 500 else ApiError)
    return cls(status_code, body)


# --- Outcomes of a decision -------------------------------------------------------


class ActionNotApproved(ImpriError):
    """The action was decided, and not approved: nothing may be executed.

    ``note`` is the reviewer's free text, ``reason`` the structured reason code
    (``None`` when the server sent none), ``decision`` the whole answer.
    """

    def __init__(self, decision: Decision):
        self.decision = decision
        self.action_id = decision.action_id
        self.status = decision.status
        self.note = decision.note
        self.reason = decision.reason
        self.decided_by = decision.decided_by
        super().__init__(self._message())

    def _message(self) -> str:
        who = f" by {self.decided_by.name}" if self.decided_by else ""
        text = f"action {self.action_id} was {self.status}{who}"
        if self.reason:
            text += f" (reason: {self.reason})"
        if self.note:
            text += f": {self.note}"
        return text


class ActionRejected(ActionNotApproved):
    """A reviewer (or a rule) rejected the action."""


class ChangesRequested(ActionNotApproved):
    """A reviewer asked for changes (status ``changes_requested``): nothing runs.

    ``note`` says what to change. Push a corrected action naming this one in
    ``supersedes`` (``client.push(..., supersedes=exc.action_id)``).
    """


class ActionExpired(ActionNotApproved):
    """Nobody decided before the action's ``expires_at``."""


class ActionCancelled(ActionNotApproved):
    """The agent cancelled the action before anyone decided."""


class AlreadySettled(ImpriError):
    """The action already carries a result (``executed`` or ``failed``): never execute it twice.

    Seen when a push is retried with the idempotency key of an action that ran.
    """

    def __init__(self, decision: Decision):
        self.decision = decision
        self.action_id = decision.action_id
        self.status = decision.status
        super().__init__(f"action {self.action_id} was already reported {self.status}")


class ResultNotReported(ImpriError):
    """The gated function ran, but its result could not be reported to Impri.

    ``value`` is what the function returned (``None`` if it raised), ``status``
    the outcome that was to be reported; report it again with ``report_result``
    (an identical report is accepted once, then ignored).
    """

    def __init__(self, action_id: str, status: str, value: Any, cause: Exception):
        self.action_id = action_id
        self.status = status
        self.value = value
        self.cause = cause
        super().__init__(f"action {action_id} ran ({status}) but the report failed: {cause}")


class DecisionTimeout(ImpriError):
    """``await_decision``'s own deadline passed while the action was still pending."""

    def __init__(self, action_id: str, waited_s: float):
        self.action_id = action_id
        self.waited_s = waited_s
        super().__init__(f"action {action_id} is still pending after {waited_s:.0f} s")
