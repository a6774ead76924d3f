"""The payload's digest: what a grant, a review and a result are bound to (pure: no model, so
the `impri grantkey` commands that import grants run before Django is set up)."""

from __future__ import annotations

import hashlib

from audit.canonical import canonical_json


def payload_sha256(payload: dict) -> str:
    """SHA-256 of the payload's canonical encoding (``audit.canonical``: numbers by value).

    The one digest used everywhere (push, reviews, approval, result, the four-eyes
    check): a payload as pushed and as read back from either database hash alike.
    """
    return hashlib.sha256(canonical_json(payload)).hexdigest()
