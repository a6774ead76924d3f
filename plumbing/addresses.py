"""Who is asking and where from: the client's address and the browser's origin.

``client_address`` is the one place that decides a request's client address:
login lockouts (django-axes), the audit log's ``ip`` and the rate limits use it.
``origin_allowed`` decides whether a browser socket comes from this site.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from django.conf import settings
from django.http.request import split_domain_port, validate_host


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text.strip().strip("[]"))
    except ValueError:
        return None


def _trusted(address) -> bool:
    return any(address in network for network in settings.IMPRI_TRUSTED_PROXIES)


def client_address(request) -> str:
    """The client's address: the peer, unless the peer is a trusted proxy.

    Behind proxies listed in ``IMPRI_TRUSTED_PROXIES``, X-Forwarded-For is read
    from the right (what our own proxies appended) and the first address that is
    not one of them is the client. Anything left of it was written by the client
    and is never believed. With no trusted proxies (the default) the header is
    ignored, so nobody can pick an address to dodge a lockout.
    """
    peer = _ip(request.META.get("REMOTE_ADDR", ""))
    if peer is None:
        return request.META.get("REMOTE_ADDR", "")[:64]
    if not _trusted(peer):
        return str(peer)
    forwarded = request.META.get("HTTP_X_FORWARDED_FOR", "")
    for hop in reversed([part for part in forwarded.split(",") if part.strip()]):
        address = _ip(hop)
        if address is None:
            break  # garbage from here on: the last trusted hop is all we know
        peer = address
        if not _trusted(address):
            break
    return str(peer)


def _origin(url: str) -> str:
    parts = urlsplit(url.strip().lower())
    return f"{parts.scheme}://{parts.netloc}" if parts.scheme and parts.netloc else ""


def origin_allowed(origin: str, host: str) -> bool:
    """A browser socket's Origin must be exactly this site: scheme, host and port.

    This site is the request's own Host (when it is an allowed host), the origin
    of ``IMPRI_BASE_URL``, or one in ``CSRF_TRUSTED_ORIGINS``. Another port of the
    same host is another origin (another app on the machine), and is refused.
    """
    origin = _origin(origin)
    if not origin:
        return False
    trusted = {_origin(o) for o in settings.CSRF_TRUSTED_ORIGINS}
    if settings.IMPRI_BASE_URL:
        trusted.add(_origin(settings.IMPRI_BASE_URL))
    if origin in trusted:
        return True
    host = host.strip().lower()
    domain, _ = split_domain_port(host)
    if not domain or not validate_host(domain, settings.ALLOWED_HOSTS):
        return False
    return origin in (f"http://{host}", f"https://{host}")
