"""Python client for Impri: a human between your agent and the actions that matter.

    from impri_client import Impri, gated

    impri = Impri("http://127.0.0.1:8000", api_key)
    action = impri.push(kind="payment.refund", title="Refund $84.00 on order 10432",
                        preview={"format": "markdown", "body": "Refund **$84.00**"},
                        payload={"order_id": "10432", "amount_cents": 8400},
                        editable=["payload.amount_cents"])
    decision = impri.await_decision(action.action_id)

See README.md for ``gated``, ``verify_webhook``, ``verify_grant`` and ``impri-agent``.
"""

from .canonical import canonical_json, payload_sha256
from .client import AsyncImpri, Impri
from .errors import (
    ActionCancelled,
    ActionExpired,
    ActionNotApproved,
    ActionRejected,
    AlreadySettled,
    ApiError,
    AuthenticationError,
    BadRequest,
    ChangesRequested,
    Conflict,
    DecisionTimeout,
    ImpriError,
    NotFound,
    PayloadTooLarge,
    PermissionDenied,
    RateLimited,
    ResultNotReported,
    ServerError,
    ServiceUnavailable,
    ValidationError,
)
from .gate import Gate, gated
from .grants import GrantClaims, InvalidGrant, fetch_jwks, verify_grant
from .types import Action, Actor, Decision, Preview, Result
from .webhooks import WebhookVerificationError, verify_webhook

__version__ = "0.1.0"

__all__ = [
    "Action",
    "ActionCancelled",
    "ActionExpired",
    "ActionNotApproved",
    "ActionRejected",
    "ChangesRequested",
    "Actor",
    "AlreadySettled",
    "ApiError",
    "AsyncImpri",
    "AuthenticationError",
    "BadRequest",
    "Conflict",
    "Decision",
    "DecisionTimeout",
    "Gate",
    "GrantClaims",
    "Impri",
    "ImpriError",
    "InvalidGrant",
    "NotFound",
    "PayloadTooLarge",
    "PermissionDenied",
    "Preview",
    "RateLimited",
    "Result",
    "ResultNotReported",
    "ServerError",
    "ServiceUnavailable",
    "ValidationError",
    "WebhookVerificationError",
    "canonical_json",
    "fetch_jwks",
    "gated",
    "payload_sha256",
    "verify_grant",
    "verify_webhook",
]
