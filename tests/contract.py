"""The seed's agent contract, checked the same way over REST, MCP over HTTP and MCP over stdio."""

from __future__ import annotations

import time

import jwt

# The seed's report, verbatim: a plain-string detail.
SEED_DETAIL = "Refunded via Stripe, txn re_1P..."


def check_seed_decision(decision: dict, action_id: str, payload: dict) -> None:
    """``{action_id, status: "approved", decision_at: 1757830200, preview: {format: "diff", body},
    edited_by_human: false}``, plus the grant and the payload to execute."""
    assert decision["action_id"] == action_id
    assert decision["status"] == "approved"
    assert type(decision["decision_at"]) is int
    assert abs(decision["decision_at"] - time.time()) < 120
    assert decision["preview"] == {"format": "diff", "body": ""}
    assert decision["edited_by_human"] is False
    assert decision["payload"] == payload
    assert decision["reason"] is None


def check_grant(grant: str, jwks: dict, action_id: str, payload_sha256: str) -> dict:
    """Verify a grant as an executor would: signature by a published key, the action, the
    payload hash, not expired."""
    header = jwt.get_unverified_header(grant)
    assert header["alg"] == "EdDSA"
    (jwk,) = [key for key in jwks["keys"] if key["kid"] == header["kid"]]
    claims = jwt.decode(grant, jwt.PyJWK(jwk).key, algorithms=["EdDSA"])
    assert claims["act"] == action_id
    assert claims["payload_sha256"] == payload_sha256
    assert claims["exp"] > time.time()
    assert claims["jti"]
    return claims


def check_reported(action: dict, action_id: str) -> None:
    """The report answers the full action, the same object over REST and MCP."""
    assert action["action_id"] == action_id
    assert action["status"] == "executed"
    assert action["result"]["status"] == "executed"
    assert action["result"]["detail"] == SEED_DETAIL
    assert type(action["result"]["reported_at"]) is int
    for key in ("created_at", "expires_at", "decision_at"):
        assert type(action[key]) is int, key
    assert action["inbox_url"].endswith(f"/inbox/actions/{action_id}")
