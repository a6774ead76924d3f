"""Checking a browser's PushSubscription before it is stored.

An endpoint is a URL Impri will POST to, so it passes the outbound-address guard
(``plumbing.outbound``) like a webhook's ``callback_url``; and it must be ``https://``
(push services are), except on networks the operator lists in
``IMPRI_CALLBACK_ALLOWED_NETWORKS``, where ``http://`` is accepted (a push relay inside
the network, a test's receiver on loopback). The keys must be what RFC 8291 needs: a
P-256 public key (65 bytes, uncompressed) and a 16-byte authentication secret.
"""

from __future__ import annotations

import base64
import binascii
import re
from urllib.parse import urlsplit

from cryptography.hazmat.primitives.asymmetric import ec

from plumbing import outbound

MAX_ENDPOINT = 2000


class Invalid(ValueError):
    """A subscription Impri will not store; the message says why."""


def _b64url(value: object, what: str) -> bytes:
    if not isinstance(value, str) or not re.fullmatch(r"[A-Za-z0-9_\-]+={0,2}", value):
        raise Invalid(f"keys.{what} must be base64url text")
    try:
        return base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))
    except (binascii.Error, ValueError):
        raise Invalid(f"keys.{what} must be base64url text") from None


def host(endpoint: str) -> str:
    try:
        return urlsplit(endpoint).hostname or ""
    except ValueError:
        return ""


def check_endpoint(endpoint: object) -> str:
    if not isinstance(endpoint, str) or not endpoint:
        raise Invalid("endpoint must be the subscription's URL")
    if len(endpoint) > MAX_ENDPOINT:
        raise Invalid(f"endpoint is longer than {MAX_ENDPOINT} characters")
    try:
        parts = urlsplit(endpoint)
        port = parts.port
    except ValueError:
        raise Invalid("endpoint is not a valid URL") from None
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise Invalid("endpoint must be an https:// URL")
    if parts.username or parts.password:
        raise Invalid("endpoint must not carry a user name or password")
    try:
        outbound.check_url(endpoint)
        if parts.scheme == "http":
            # Plain http only where the operator allowed the network: every address it resolves to.
            networks = outbound.allowed_networks()
            addresses = outbound.resolve(parts.hostname, port or 80)
            if not networks or not all(outbound.is_allowed(ip, networks) for ip in addresses):
                raise Invalid(
                    "endpoint must be an https:// URL (http:// only on networks in "
                    "IMPRI_CALLBACK_ALLOWED_NETWORKS)"
                )
    except outbound.Refused as exc:
        raise Invalid(f"endpoint refused: {exc}") from None
    return endpoint


def parse(body: dict) -> dict:
    """The fields of a ``PushSubscription`` JSON, checked; or Invalid."""
    endpoint = check_endpoint(body.get("endpoint"))
    keys = body.get("keys")
    if not isinstance(keys, dict):
        raise Invalid("keys must hold p256dh and auth")
    p256dh, auth = keys.get("p256dh"), keys.get("auth")
    point = _b64url(p256dh, "p256dh")
    if len(point) != 65 or point[0] != 4:
        raise Invalid("keys.p256dh must be an uncompressed P-256 public key (65 bytes)")
    try:
        ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), point)
    except ValueError:
        raise Invalid("keys.p256dh is not a point on P-256") from None
    if len(_b64url(auth, "auth")) != 16:
        raise Invalid("keys.auth must be 16 bytes")
    return {"endpoint": endpoint, "p256dh": p256dh.rstrip("="), "auth": auth.rstrip("=")}


BROWSERS = (("Edg/", "Edge"), ("Firefox/", "Firefox"), ("Chrome/", "Chrome"), ("Safari/", "Safari"))
SYSTEMS = (
    ("Android", "Android"),
    ("iPhone", "iPhone"),
    ("iPad", "iPad"),
    ("Mac OS X", "macOS"),
    ("Windows", "Windows"),
    ("Linux", "Linux"),
)


def device_label(user_agent: str) -> str:
    """A label like "Chrome on Android": enough for a reviewer to tell their devices apart."""
    browser = next((name for mark, name in BROWSERS if mark in user_agent), "A browser")
    system = next((name for mark, name in SYSTEMS if mark in user_agent), "")
    return f"{browser} on {system}" if system else browser
