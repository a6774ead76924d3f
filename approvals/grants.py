"""Grants: a signed, single-use proof of one approval that the executor can check offline.

An approved action carries a compact JWS (``alg: EdDSA``) whose claims bind it
to the action id, the SHA-256 of the approved payload and an expiry::

    {"act": "act_…", "payload_sha256": "…", "iat": 1757830200, "exp": 1757833800, "jti": "…"}

The payment service (or any executor) fetches Impri's public keys once from
``/.well-known/jwks.json``, verifies the signature, recomputes the payload's
hash, refuses an expired grant and remembers ``jti`` so a grant moves money
once. The grant is signed and stored (``IssuedGrant``) in the decision's
transaction, and every read of the decision returns those bytes, after a key
rotation too; a decision made before grants were stored is signed on its first
read and stored then (:func:`grant_for`).

The signing key comes from ``IMPRI_GRANT_SIGNING_KEY`` (PEM text) or
``IMPRI_GRANT_SIGNING_KEY_FILE`` (``impri grantkey new`` makes one), else it is
generated once into ``<data dir>/grant-keys/current.pem``. ``impri grantkey
rotate`` replaces the generated key and keeps the retired public key published,
so grants signed before the rotation still verify until the operator removes it.

Every server that signs grants (``serve``, ``worker``; not ``beat``) publishes
the public half of its key to the database when it starts (:func:`publish`,
``approvals.models.GrantSigningKey``); the JWKS lists every published key that is
not retired, so replicas that each generated their own key still verify each
other's grants. They should share one all the same: :func:`keys_signing` counts
the keys still signing, and the system check ``impri.W003``, ``/readyz``,
``/metrics`` and the admin index report more than one. ``impri mcp`` (stdio)
publishes nothing: it signs with the key the servers published, or refuses to
start (:func:`use_shared_key`). A process notes on the key's row that it signs
with it (``last_signed_at``, once a minute), so :func:`retire` refuses a key in
use; a retired key is never published again.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import logging
import os
import socket
import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from django.conf import settings
from django.db import DatabaseError, IntegrityError, transaction
from django.utils import timezone

from approvals.models import GrantSigningKey, IssuedGrant

from . import grant_pem
from .digests import payload_sha256

logger = logging.getLogger(__name__)

ALGORITHM = "EdDSA"
_lock = threading.Lock()
_cache: dict[str, object] = {}


class GrantError(Exception):
    """A grant that does not verify, or belongs to another action or payload."""


class KeyRefused(ValueError):
    """A key this process may not use or retire; the message is one line for the operator."""


@dataclass(frozen=True)
class SigningKey:
    private: Ed25519PrivateKey
    kid: str
    source: str = ""


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


def _write_new(path: Path, key: Ed25519PrivateKey) -> bool:
    """Write ``key`` to ``path`` unless it exists (another process won the race)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return False
    with os.fdopen(fd, "wb") as out:
        out.write(grant_pem.dump(key))
    return True


def _source() -> str:
    if settings.IMPRI_GRANT_SIGNING_KEY:
        return "IMPRI_GRANT_SIGNING_KEY"
    if settings.IMPRI_GRANT_SIGNING_KEY_FILE:
        return f"IMPRI_GRANT_SIGNING_KEY_FILE={settings.IMPRI_GRANT_SIGNING_KEY_FILE}"
    return f"generated in {key_dir()} on {socket.gethostname()}"


def signing_key() -> SigningKey:
    with _lock:
        cached = _cache.get("signing")
        if cached is None:
            pem = _configured_pem()
            if pem is None:
                path = key_dir() / "current.pem"
                if not path.exists():
                    if _shared_only:
                        raise KeyRefused(NO_SHARED_KEY)
                    _write_new(path, Ed25519PrivateKey.generate())
                pem = path.read_bytes()
            private = grant_pem.load(pem)
            cached = _cache["signing"] = SigningKey(
                private, public_jwk(private.public_key())["kid"], _source()
            )
        return cached  # type: ignore[return-value]


def publish() -> str:
    """Publish the public half of this process's signing key (at start); returns its kid.

    Idempotent, and safe when replicas start together. A key that was retired is
    never published again (:class:`KeyRefused`): its grants stay refused, and the
    process must be given the deployment's current key.
    """

    if _shared_only:
        raise KeyRefused("this process signs with the servers' published key; it publishes none")
    key = signing_key()
    jwk = public_jwk(key.private.public_key())
    now = timezone.now()
    fields = {"last_published_at": now, "source": key.source[:300]}
    for _ in range(2):
        if GrantSigningKey.objects.filter(kid=key.kid, retired_at__isnull=True).update(**fields):
            break
        if GrantSigningKey.objects.filter(kid=key.kid).exists():
            raise KeyRefused(_retired_line(key))
        try:
            with transaction.atomic():
                GrantSigningKey.objects.create(kid=key.kid, jwk=jwk, published_at=now, **fields)
            break
        except IntegrityError:  # another replica published it in between: update it
            continue
    kid = key.kid
    transaction.on_commit(lambda: _cache.__setitem__("published", kid), robust=True)
    return kid


def _publish_once() -> None:
    """Before the first grant this process signs, if publishing at start did not happen.

    A server started before `impri migrate` could not publish then; its grants must
    still verify against the other replicas' JWKS. One savepoint, once per key.
    """
    if _cache.get("published") == signing_key().kid or _on_loop():
        return  # on the event loop (the gateway signs there): no database here
    try:
        with transaction.atomic():
            publish()
    except DatabaseError as exc:
        logger.warning("grant signing key not published (run impri migrate): %s", exc)
    except KeyRefused as exc:
        _cache["published"] = signing_key().kid  # said once, not before every grant
        logger.error("%s", exc)


def _on_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def publish_at_start() -> None:
    """:func:`publish` at a process's start: an unready database is a warning, a retired
    key an error (the process runs; its grants won't verify until it has the current key)."""
    try:
        publish()
    except DatabaseError as exc:
        logger.warning("grant signing key not published (run impri migrate): %s", exc)
    except KeyRefused as exc:
        _cache["published"] = signing_key().kid
        logger.error("%s", exc)


def _retired_line(key: SigningKey) -> str:
    return (
        f"the grant signing key {key.kid} ({key.source}) was retired (impri grantkey retire) "
        "and is never published again: give this process the deployment's current key "
        "(IMPRI_GRANT_SIGNING_KEY_FILE), or run impri grantkey rotate for a generated one"
    )


NO_SHARED_KEY = (
    "impri mcp signs grants with the key impri serve publishes and has none: set "
    "IMPRI_GRANT_SIGNING_KEY_FILE to the key your serve processes use (or start impri serve "
    "once with this IMPRI_DATA_DIR)"
)
_shared_only = False


def use_shared_key() -> str:
    """For ``impri mcp``: sign only with a key a server published; never generate or publish one.

    The key is the configured one, which a server must have published, else (embedded
    mode) the key of this data directory, the one ``impri serve`` signs with here. Returns
    its kid; :class:`KeyRefused` (one line naming the setting) when there is none, when a
    configured key was never published, or when it was retired.
    """

    global _shared_only
    _shared_only = True
    key = signing_key()
    row = GrantSigningKey.objects.filter(kid=key.kid).first()
    if row is None and not settings.DATABASE_URL and _configured_pem() is None:
        row = GrantSigningKey(kid=key.kid)  # this data directory's: serve publishes it at start
    if row is None:
        raise KeyRefused(
            f"the grant signing key {key.kid} ({key.source}) is not one impri serve published: "
            "set IMPRI_GRANT_SIGNING_KEY_FILE to the key your serve processes use"
        )
    if row.retired_at is not None:
        raise KeyRefused(_retired_line(key))
    _cache["published"] = key.kid
    return key.kid


def _noting_interval_s() -> float:
    return min(60.0, settings.IMPRI_KEY_LIVE_S / 4)


def _note_signing(kid: str) -> None:
    """Mark on the key's row that a live process signs with it (at most once a minute).

    After the change commits, so the decision's transaction holds no lock on the key's
    row. A retired key is not touched; the process says once that its grants won't verify.
    """
    now = time.monotonic()
    last = _cache.get("noted")
    if (isinstance(last, float) and now - last < _noting_interval_s()) or _on_loop():
        return
    _cache["noted"] = now

    def note() -> None:

        try:
            noted = GrantSigningKey.objects.filter(kid=kid, retired_at__isnull=True).update(
                last_signed_at=timezone.now()
            )
        except DatabaseError as exc:
            logger.warning("could not note the grant key in use: %s", exc)
            return
        if not noted and GrantSigningKey.objects.filter(kid=kid).exists():
            logger.error("%s", _retired_line(signing_key()))

    transaction.on_commit(note, robust=True)


def _published() -> list:

    return list(GrantSigningKey.objects.filter(retired_at__isnull=True))


def keys_signing() -> list[str]:
    """The kids of keys that still sign: published, neither rotated out nor retired, and ours."""
    kids = [row.kid for row in _published() if row.superseded_at is None]
    own = signing_key().kid
    return kids if own in kids else [own, *kids]


def _own_key_retired() -> bool:

    return GrantSigningKey.objects.filter(kid=signing_key().kid, retired_at__isnull=False).exists()


def several_keys_problem() -> str | None:
    """One line for operators when replicas sign with different keys (or this process with
    a retired one), else None."""
    if _own_key_retired():
        return _retired_line(signing_key())
    kids = keys_signing()
    if len(kids) < 2:
        return None
    return (
        f"{len(kids)} different grant signing keys are in use ({', '.join(kids)}): the "
        "replicas do not share IMPRI_GRANT_SIGNING_KEY_FILE. Grants still verify everywhere "
        "(the JWKS lists every key), but give every process the same key "
        "(impri grantkey new > grant_key), restart them, then retire the others with "
        "impri grantkey retire -- KID once their grants have expired."
    )


def retired_public_keys() -> list[Ed25519PublicKey]:
    keys = []
    for path in sorted(key_dir().glob("retired-*.pub.pem")):
        public = serialization.load_pem_public_key(path.read_bytes())
        if isinstance(public, Ed25519PublicKey):
            keys.append(public)
    return keys


def verifying_keys() -> dict[str, Ed25519PublicKey]:
    """Every key a grant of this deployment may be signed with, by kid: ours first.
    A retired key is not one of them, not even when this process signs with it."""

    rows = list(GrantSigningKey.objects.all())
    retired = {row.kid for row in rows if row.retired_at is not None}
    keys = {signing_key().kid: signing_key().private.public_key()}
    for public in retired_public_keys():
        keys.setdefault(public_jwk(public)["kid"], public)
    keys = {kid: public for kid, public in keys.items() if kid not in retired}
    for row in rows:
        if row.kid not in keys and row.kid not in retired:
            raw = base64.urlsafe_b64decode(row.jwk["x"] + "=" * (-len(row.jwk["x"]) % 4))
            keys[row.kid] = Ed25519PublicKey.from_public_bytes(raw)
    return keys


def jwks() -> dict:
    """The public keys an executor verifies grants with: the current one first."""
    return {"keys": [public_jwk(k) for k in verifying_keys().values()]}


def retire(kid: str, *, force: bool = False) -> None:
    """Stop publishing ``kid`` for good (its grants no longer verify); never this process's key.

    A key that a process published at its start or signed with in the last
    ``IMPRI_KEY_LIVE_S`` is refused unless ``force``: that process's grants would be
    refused from then on.
    """

    if kid == signing_key().kid:
        raise KeyRefused(f"{kid} is the key this process signs with: it cannot be retired here")
    row = GrantSigningKey.objects.select_for_update().filter(kid=kid).first()
    if row is None:
        raise KeyRefused(f"no published grant signing key {kid} (impri grantkey list)")
    used = max(t for t in (row.last_published_at, row.last_signed_at) if t is not None)
    live_s = settings.IMPRI_KEY_LIVE_S
    if not force and row.retired_at is None and timezone.now() - used < timedelta(seconds=live_s):
        raise KeyRefused(
            f"{kid} was in use by a running process at {used:%Y-%m-%d %H:%M:%S} UTC, within "
            f"IMPRI_KEY_LIVE_S ({live_s} s): its grants would be refused from now on. Give every "
            "process the current key and restart them, wait, or retire it with --force"
        )
    if row.retired_at is None:
        GrantSigningKey.objects.filter(kid=kid).update(retired_at=timezone.now())
    for path in key_dir().glob(f"retired-{kid}.pub.pem"):
        path.unlink()


def forget_keys() -> None:
    """Drop the cached key (after a rotation, and between tests)."""
    global _shared_only
    with _lock:
        _cache.clear()
        _shared_only = False


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
    try:
        with transaction.atomic():
            publish()
            GrantSigningKey.objects.filter(kid=old.kid).update(superseded_at=timezone.now())
    except DatabaseError as exc:  # not migrated yet: the servers publish the key when they start
        logger.warning("the new grant key is not published yet: %s", exc)
    return old.kid, signing_key().kid


def claims_for(action) -> dict | None:
    """What a grant for ``action`` asserts, or None when the action carries none."""
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
    _publish_once()
    key = signing_key()
    _note_signing(key.kid)
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
    public = verifying_keys().get(header.get("kid"))
    if public is None and _is_stored(grant, action):
        # The very grant stored with this decision, its key retired since: Impri's own record.
        return jwt.decode(grant, options={"verify_signature": False})
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


def _is_stored(grant: str, action) -> bool:

    return IssuedGrant.objects.filter(action_id=action.pk, token=grant).exists()
