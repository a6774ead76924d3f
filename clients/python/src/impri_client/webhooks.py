"""Verify a webhook from Impri (Standard Webhooks, v1 signatures).

Impri POSTs the decision body to an action's ``callback_url`` with three
headers: ``webhook-id`` (the same on every retry: deduplicate on it),
``webhook-timestamp`` (Unix seconds of this attempt) and ``webhook-signature``
(``v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">``, keyed with the
agent's ``whsec_`` secret; several space-separated signatures may be sent
while a secret rotates).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import time
from collections.abc import Mapping
from typing import Any

from .errors import ImpriError

__all__ = ["WebhookVerificationError", "verify_webhook"]

# Refuse messages signed longer ago (or further ahead) than this: a replayed
# old delivery must not pass.
DEFAULT_TOLERANCE_S = 300


class WebhookVerificationError(ImpriError):
    """The request is not a genuine, fresh webhook from Impri: answer 400 and drop it."""


def verify_webhook(
    headers: Mapping[str, str],
    body: bytes | str,
    secret: str,
    *,
    tolerance_s: float = DEFAULT_TOLERANCE_S,
    now: float | None = None,
) -> dict[str, Any]:
    """Check the signature and freshness of a delivery; answer its parsed JSON body.

    ``body`` must be the raw bytes received (not re-serialized JSON).
    ``secret`` is the agent's ``whsec_…`` secret. Raises
    :class:`WebhookVerificationError`.
    """
    lowered = {name.lower(): value for name, value in headers.items()}
    msg_id = lowered.get("webhook-id")
    timestamp = lowered.get("webhook-timestamp")
    signatures = lowered.get("webhook-signature")
    if not (msg_id and timestamp and signatures):
        raise WebhookVerificationError(
            "missing webhook-id, webhook-timestamp or webhook-signature header"
        )
    try:
        sent_at = int(timestamp)
    except ValueError:
        raise WebhookVerificationError("webhook-timestamp is not an integer") from None
    now = time.time() if now is None else now
    if abs(now - sent_at) > tolerance_s:
        raise WebhookVerificationError("webhook-timestamp is too far from now (replayed?)")
    raw = body.encode("utf-8") if isinstance(body, str) else bytes(body)
    expected = _sign(_key(secret), msg_id, sent_at, raw)
    for candidate in signatures.split():
        version, _, value = candidate.partition(",")
        if version == "v1" and hmac.compare_digest(value.encode(), expected.encode()):
            break
    else:
        raise WebhookVerificationError("no signature matches")
    try:
        return json.loads(raw)
    except ValueError:
        raise WebhookVerificationError("the body is not JSON") from None


def _key(secret: str) -> bytes:
    try:
        return base64.b64decode(secret.removeprefix("whsec_"), validate=True)
    except (binascii.Error, ValueError):
        raise WebhookVerificationError("the secret is not a whsec_ secret") from None


def _sign(key: bytes, msg_id: str, timestamp: int, body: bytes) -> str:
    signed = f"{msg_id}.{timestamp}.".encode() + body
    return base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
