"""Verify an Impri grant: the signed, single-use permission that comes with an approval.

A grant is a compact JWS (``header.claims.signature``, base64url) signed with
Ed25519 (``alg: EdDSA``; RFC 9864's fully specified ``Ed25519`` is accepted too). Its claims bind it to one action (``act``), to the
SHA-256 of the approved payload (``payload_sha256``), and to an expiry
(``exp``); ``jti`` is its unique id. Impri publishes the public keys at
``{base_url}/.well-known/jwks.json``, so the system that moves money can check
a grant offline before acting.

Single use is the executor's part: remember each ``jti`` you honoured (until
its ``exp``) and refuse it a second time.

Needs ``cryptography``: ``pip install 'impri-client[grants]'``.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import json
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import httpx

from .canonical import payload_sha256
from .errors import ImpriError

__all__ = ["GrantClaims", "InvalidGrant", "fetch_jwks", "verify_grant"]

# Impri signs EdDSA (PyJWT knows no Ed25519 yet); RFC 9864 names the same signature Ed25519.
ALGORITHMS = ("EdDSA", "Ed25519")


class InvalidGrant(ImpriError):
    """The grant must not be honoured. ``code`` says why.

    Codes: ``malformed``, ``unsupported_alg``, ``unknown_key``,
    ``bad_signature``, ``expired``, ``not_yet_valid``, ``payload_mismatch``,
    ``wrong_action``.
    """

    def __init__(self, code: str, message: str):
        self.code = code
        super().__init__(f"invalid grant ({code}): {message}")


@dataclass(frozen=True)
class GrantClaims:
    action_id: str
    payload_sha256: str
    expires_at: datetime
    issued_at: datetime | None
    jti: str
    kid: str | None
    raw: dict = field(repr=False, compare=False)


def fetch_jwks(base_url: str, *, timeout: float = 10.0) -> dict:
    """GET ``{base_url}/.well-known/jwks.json`` (no key needed). Cache it; refetch on a new kid."""
    response = httpx.get(base_url.rstrip("/") + "/.well-known/jwks.json", timeout=timeout)
    response.raise_for_status()
    return response.json()


def verify_grant(
    grant: str,
    payload: Any,
    *,
    jwks: dict | list,
    action_id: str | None = None,
    now: float | None = None,
    leeway_s: float = 0,
) -> GrantClaims:
    """Check ``grant`` against the payload about to be executed; answer its claims or raise.

    1. The header names ``alg: EdDSA`` or ``Ed25519`` (anything else, ``none`` included, is refused).
    2. The signature verifies with the Ed25519 key of the header's ``kid`` in ``jwks``.
    3. ``exp`` is in the future (``leeway_s`` allows for clock skew).
    4. ``payload_sha256`` equals the hash of ``payload`` (see ``canonical_json``).
    5. With ``action_id``, ``act`` names that action.

    ``jwks`` is ``{"keys": [...]}`` as Impri publishes it (or a list of JWKs).
    Raises :class:`InvalidGrant`.
    """
    _require_cryptography()
    header, claims, signing_input, signature = _split(grant)
    if header.get("alg") not in ALGORITHMS:
        raise InvalidGrant("unsupported_alg", f"alg must be EdDSA, got {header.get('alg')!r}")
    key = _find_key(jwks, header.get("kid"))
    _check_signature(key, signature, signing_input)
    return _check_claims(claims, header, payload, action_id, now, leeway_s)


def _require_cryptography() -> None:
    try:
        import cryptography.hazmat.primitives.asymmetric.ed25519  # noqa: F401
    except ImportError:
        raise ImportError(
            "verify_grant needs the cryptography package: pip install 'impri-client[grants]'"
        ) from None


def _b64decode(part: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
    except (binascii.Error, ValueError):
        raise InvalidGrant("malformed", "a part is not base64url") from None


def _split(grant: str) -> tuple[dict, dict, bytes, bytes]:
    if not isinstance(grant, str) or grant.count(".") != 2:
        raise InvalidGrant("malformed", "not a compact JWS (header.claims.signature)")
    header_b64, claims_b64, signature_b64 = grant.split(".")
    try:
        header = json.loads(_b64decode(header_b64))
        claims = json.loads(_b64decode(claims_b64))
    except (ValueError, UnicodeDecodeError):
        raise InvalidGrant("malformed", "header or claims are not JSON") from None
    if not isinstance(header, dict) or not isinstance(claims, dict):
        raise InvalidGrant("malformed", "header and claims must be JSON objects")
    signing_input = f"{header_b64}.{claims_b64}".encode("ascii")
    return header, claims, signing_input, _b64decode(signature_b64)


def _find_key(jwks: dict | list, kid: str | None) -> dict:
    keys = jwks.get("keys", [jwks]) if isinstance(jwks, dict) else list(jwks)
    usable = [
        key
        for key in keys
        if key.get("kty") == "OKP"
        and key.get("crv") == "Ed25519"
        and key.get("use", "sig") == "sig"
    ]
    if kid is not None:
        usable = [key for key in usable if key.get("kid") == kid]
    elif len(usable) != 1:
        usable = []  # without a kid only an unambiguous key set will do
    if not usable:
        raise InvalidGrant("unknown_key", f"no Ed25519 key with kid {kid!r} in the key set")
    return usable[0]


def _check_signature(key: dict, signature: bytes, signing_input: bytes) -> None:
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    try:
        public_key = Ed25519PublicKey.from_public_bytes(_b64decode(key.get("x", "")))
    except ValueError:
        raise InvalidGrant("unknown_key", "the key's x is not an Ed25519 public key") from None
    try:
        public_key.verify(signature, signing_input)
    except InvalidSignature:
        raise InvalidGrant("bad_signature", "the signature does not verify") from None


def _check_claims(
    claims: dict,
    header: dict,
    payload: Any,
    action_id: str | None,
    now: float | None,
    leeway_s: float,
) -> GrantClaims:
    now = time.time() if now is None else now
    exp, iat = claims.get("exp"), claims.get("iat")
    for name in ("act", "payload_sha256", "jti"):
        if not isinstance(claims.get(name), str) or not claims[name]:
            raise InvalidGrant("malformed", f"claim {name!r} is missing")
    if not isinstance(exp, int | float) or isinstance(exp, bool):
        raise InvalidGrant("malformed", "claim 'exp' is missing")
    if now >= exp + leeway_s:
        raise InvalidGrant("expired", f"expired at {_utc(exp).isoformat()}")
    nbf = claims.get("nbf")
    if isinstance(nbf, int | float) and now + leeway_s < nbf:
        raise InvalidGrant("not_yet_valid", f"valid from {_utc(nbf).isoformat()}")
    if not hmac.compare_digest(claims["payload_sha256"].encode(), payload_sha256(payload).encode()):
        raise InvalidGrant("payload_mismatch", "the payload is not the one that was approved")
    if action_id is not None and claims["act"] != action_id:
        raise InvalidGrant("wrong_action", f"the grant is for {claims['act']}, not {action_id}")
    return GrantClaims(
        action_id=claims["act"],
        payload_sha256=claims["payload_sha256"],
        expires_at=_utc(exp),
        issued_at=_utc(iat) if isinstance(iat, int | float) else None,
        jti=claims["jti"],
        kid=header.get("kid"),
        raw=claims,
    )


def _utc(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, tz=timezone.utc)
