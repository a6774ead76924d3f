"""The VAPID key pair (RFC 8292) that signs every push: given, or generated into the data dir.

``IMPRI_VAPID_PRIVATE_KEY`` (or ``IMPRI_VAPID_PRIVATE_KEY_FILE``) holds a P-256 private
key as PEM, or as base64url DER or raw bytes; unset, one is generated once into
``IMPRI_DATA_DIR/vapid_private_key.pem`` (mode 0600). Every process of a scaled
deployment must share it: browsers subscribed with its public half, and a push signed
with another key is refused by the push service.
"""

from __future__ import annotations

import base64
import functools
import os
import time
from pathlib import Path
from urllib.parse import urlsplit

from cryptography.hazmat.primitives import serialization
from django.conf import settings
from py_vapid import Vapid

from plumbing import public_url

FILE_NAME = "vapid_private_key.pem"
# A VAPID token's `exp` (RFC 8292: at most 24 hours ahead): half that, so a push service whose
# clock runs hours behind ours still sees less than 24 hours. Each push signs a fresh token.
VAPID_EXPIRY_S = 12 * 3600


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


@functools.cache
def _load(given: str, data_dir: str) -> Vapid:
    if given.strip():
        text = given.strip()
        if "-----BEGIN" in text:
            key = serialization.load_pem_private_key(text.encode(), password=None)
            return Vapid(key)
        return Vapid.from_string(text)
    path = Path(data_dir) / FILE_NAME
    if not path.exists():
        vapid = Vapid()
        vapid.generate_keys()
        path.parent.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(descriptor, "wb") as out:
                out.write(vapid.private_pem())
        except FileExistsError:  # another process wrote it first: use that one
            pass
    key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    return Vapid(key)


def vapid() -> Vapid:
    return _load(settings.IMPRI_VAPID_PRIVATE_KEY, str(settings.DATA_DIR))


def public_key() -> str:
    """The public key as browsers take it (``applicationServerKey``): base64url, uncompressed point."""
    point = vapid().public_key.public_bytes(
        serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
    )
    return b64url(point)


def subject() -> str:
    """Who runs this server, for push services (``sub``): the setting, else the base URL if https."""
    if settings.IMPRI_VAPID_SUBJECT:
        return settings.IMPRI_VAPID_SUBJECT
    base = public_url.base_url()
    return base if base.startswith("https://") else "mailto:impri@localhost"


def authorization(endpoint: str) -> str:
    """The ``Authorization: vapid t=…, k=…`` header for one push service (its origin is ``aud``)."""
    parts = urlsplit(endpoint)
    audience = f"{parts.scheme}://{parts.netloc.rsplit('@', 1)[-1]}"
    claims = {"aud": audience, "sub": subject(), "exp": int(time.time()) + VAPID_EXPIRY_S}
    return vapid().sign(claims)["Authorization"]
