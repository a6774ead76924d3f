"""Grants: a signed, single-use proof of one approval that the executor can check offline.

An approved action carries a compact JWS (``alg: EdDSA``) whose claims bind it
to the action id, the SHA-256 of the approved payload and an expiry::

    {"act": "act_…", "payload_sha256": "…", "iat": 1757830200, "exp": 1757833800, "jti": "…"}

The payment service (or any executor) fetches Impri's public keys once from
``/.well-known/jwks.json``, verifies the signature, recomputes the payload's
hash, refuses an expired grant and remembers ``jti`` so a grant moves money
once. Nothing is stored per grant: Ed25519 signatures are deterministic, and
every claim derives from the decided action, so each read of a decision
returns the same grant.

The signing key comes from ``IMPRI_GRANT_SIGNING_KEY`` (PEM text) or
``IMPRI_GRANT_SIGNING_KEY_FILE``, else it is generated once into
``<data dir>/grant-keys/current.pem``. ``impri grantkey rotate`` replaces the
generated key and keeps the retired public key published, so grants signed
before the rotation still verify until the operator removes it.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from django.conf import settings

ALGORITHM = "EdDSA"
_lock = threading.Lock()
_cache: dict[str, object] = {}


class GrantError(Exception):
    """A grant that does not verify, or belongs to another action or payload."""


@dataclass(frozen=True)
class SigningKey:
    private: Ed25519PrivateKey
    kid: str


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def public_jwk(public: Ed25519PublicKey) -> dict:
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    jwk = {"crv": "Ed25519", "kty": "OKP", "x": _b64(raw)}
    # RFC 7638 thumbprint: SHA-256 of the required members, sorted, no spaces.
    kid = _b64(hashlib.sha256(json.dumps(jwk, separators=(",", ":")).encode()).digest())
    return {**jwk, "kid": kid, "alg": ALGORITHM, "use": "sig"}


def key_dir() -> Path:
    return Path(settings.DATA_DIR) / "grant-keys"


def _configured_pem() -> bytes | None:
    if settings.IMPRI_GRANT_SIGNING_KEY:
        return settings.IMPRI_GRANT_SIGNING_KEY.encode()
    if settings.IMPRI_GRANT_SIGNING_KEY_FILE:
        return Path(settings.IMPRI_GRANT_SIGNING_KEY_FILE).read_bytes()
    return None


def _load_pem(pem: bytes) -> Ed25519PrivateKey:
    key = serialization.load_pem_private_key(pem, password=None)
    if not isinstance(key, Ed25519PrivateKey):
        raise ValueError("the grant signing key must be an Ed25519 private key (PEM, PKCS#8)")
    return key


def _pem(key: Ed25519PrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _write_new(path: Path, key: Ed25519PrivateKey) -> bool:
    """Write ``key`` to ``path`` unless it exists (another process won the race)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return False
    with os.fdopen(fd, "wb") as out:
        out.write(_pem(key))
    return True


def signing_key() -> SigningKey:
    with _lock:
        cached = _cache.get("signing")
        if cached is None:
            pem = _configured_pem()
            if pem is None:
                path = key_dir() / "current.pem"
                if not path.exists():
                    _write_new(path, Ed25519PrivateKey.generate())
                pem = path.read_bytes()
            private = _load_pem(pem)
            cached = _cache["signing"] = SigningKey(
                private, public_jwk(private.public_key())["kid"]
            )
        return cached  # type: ignore[return-value]


def retired_public_keys() -> list[Ed25519PublicKey]:
    keys = []
    for path in sorted(key_dir().glob("retired-*.pub.pem")):
        public = serialization.load_pem_public_key(path.read_bytes())
        if isinstance(public, Ed25519PublicKey):
            keys.append(public)
    return keys


def jwks() -> dict:
    """The public keys an executor verifies grants with: the current one first."""
    current = signing_key().private.public_key()
    return {"keys": [public_jwk(k) for k in [current, *retired_public_keys()]]}


def forget_keys() -> None:
    """Drop the cached key (after a rotation, and between tests)."""
    with _lock:
        _cache.clear()


def rotate() -> tuple[str, str]:
    """Replace the generated key; the old public key stays published. Returns (old, new) kids."""
    if _configured_pem() is not None:
        raise ValueError(
            "the grant signing key comes from IMPRI_GRANT_SIGNING_KEY(_FILE): rotate it there"
        )
    old = signing_key()
    directory = key_dir()
    public_pem = old.private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    (directory / f"retired-{old.kid}.pub.pem").write_bytes(public_pem)
    new = Ed25519PrivateKey.generate()
    tmp = directory / f"next-{os.getpid()}.pem"
    tmp.unlink(missing_ok=True)
    _write_new(tmp, new)
    os.replace(tmp, directory / "current.pem")
    forget_keys()
    return old.kid, signing_key().kid


def claims_for(action) -> dict | None:
    """What a grant for ``action`` asserts, or None when the action carries none."""
    from .services import payload_sha256

    if action.decided_at is None or not action.was_approved:
        return None
    issued = int(action.decided_at.timestamp())
    digest = payload_sha256(action.payload)
    jti = _b64(hashlib.sha256(f"{action.pk}|{digest}|{issued}".encode()).digest()[:16])
    return {
        "act": action.pk,
        "payload_sha256": digest,
        "iat": issued,
        "exp": issued + settings.IMPRI_GRANT_TTL_S,
        "jti": jti,
    }


def sign(claims: dict) -> str:
    key = signing_key()
    return jwt.encode(
        claims, key.private, algorithm=ALGORITHM, headers={"kid": key.kid, "typ": "JWT"}
    )


def check(grant: str, action) -> dict:
    """The claims of ``grant`` if it is Impri's grant for this action's approved payload.

    Expiry is not checked here: a report describes an execution that happened
    when the grant was valid; the executor enforces ``exp`` before moving money.
    """
    try:
        header = jwt.get_unverified_header(grant)
    except jwt.PyJWTError as exc:
        raise GrantError(f"grant is not a compact JWS ({exc})") from None
    keys = {public_jwk(k)["kid"]: k for k in [signing_key().private.public_key()]}
    keys.update({public_jwk(k)["kid"]: k for k in retired_public_keys()})
    public = keys.get(header.get("kid"))
    if public is None:
        raise GrantError("grant was not signed by one of this server's keys")
    try:
        claims = jwt.decode(
            grant,
            public,
            algorithms=[ALGORITHM],
            options={"verify_exp": False, "require": ["act", "payload_sha256", "jti", "exp"]},
        )
    except jwt.PyJWTError as exc:
        raise GrantError(f"grant does not verify ({exc})") from None
    expected = claims_for(action)
    if expected is None or claims["act"] != action.pk:
        raise GrantError(f"grant {claims['jti']} was issued for another action ({claims['act']})")
    if claims["payload_sha256"] != expected["payload_sha256"] or claims["jti"] != expected["jti"]:
        raise GrantError(f"grant {claims['jti']} does not match the approved payload")
    return claims
