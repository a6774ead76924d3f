"""Grant signing keys as PEM text: Ed25519, PKCS#8, unencrypted.

No model, no setting: ``impri grantkey new`` prints a key before Django's settings or apps
are loaded (``impri/cli.py``); ``approvals.grants`` reads and writes keys with these.
"""

from __future__ import annotations

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey


def load(pem: bytes) -> Ed25519PrivateKey:
    key = serialization.load_pem_private_key(pem, password=None)
    if not isinstance(key, Ed25519PrivateKey):
        raise ValueError("the grant signing key must be an Ed25519 private key (PEM, PKCS#8)")
    return key


def dump(key: Ed25519PrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def new_pem() -> str:
    """A new Ed25519 signing key as PEM text (``impri grantkey new``): no database, no files."""
    return dump(Ed25519PrivateKey.generate()).decode()
