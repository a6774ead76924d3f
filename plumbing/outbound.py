"""Where Impri may send HTTP requests: the guard for agent- and admin-supplied URLs (SSRF).

An agent's ``callback_url`` and a group's Slack webhook URL (entered in admin)
name hosts Impri will POST to. Left unchecked they reach whatever the server
can reach: the metadata service, the database's admin port, the Redis next
door. So a destination must be public unless the operator allows it:

* **Refused** by default: loopback, private, link-local, shared (CGNAT,
  100.64.0.0/10), unique-local (fc00::/7), unspecified, multicast and other
  reserved addresses, and IPv6 forms that embed one of those IPv4 addresses
  (IPv4-mapped, IPv4-compatible, 6to4, NAT64).
* **Every spelling** is caught because the host is always resolved with the
  system resolver (``127.1``, ``2130706433``, ``0x7f000001``, names in
  ``/etc/hosts``), and every address it resolves to must pass.
* ``localhost``, ``localhost.`` and ``*.localhost`` are loopback by name
  (RFC 6761): they pass only if the allow-list covers all of loopback
  (``127.0.0.0/8`` and ``::1``); allowing ``127.0.0.1/32`` does not allow them.
* ``IMPRI_CALLBACK_ALLOWED_NETWORKS`` (CIDRs) lets an operator allow internal
  receivers.

The check runs when the URL is accepted (push, admin form) and again on every
connection (:class:`GuardedBackend`): the name is resolved once, every address
checked, and the socket opened to a checked address, so a name that changes
its answer between the check and the connection (DNS rebinding) reaches
nothing new. TLS server name and ``Host`` stay the URL's own. Redirects are
never followed. The operator's own configuration (environment variables, the
SMTP server) is not subject to this guard.
"""

from __future__ import annotations

import functools
import ipaddress
import socket
from collections.abc import Callable
from urllib.parse import urlsplit

import httpcore
import httpx
from django.conf import settings

from compat.httpx import PoolTransport

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

LOOPBACK = (ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128"))
SHARED = ipaddress.ip_network("100.64.0.0/10")
UNIQUE_LOCAL = ipaddress.ip_network("fc00::/7")
NAT64 = ipaddress.ip_network("64:ff9b::/96")
IPV4_COMPATIBLE = ipaddress.ip_network("::/96")

# The system resolver (nsswitch: /etc/hosts, then DNS). Tests give names
# answers of their own here, like a hosts file, so no query leaves the machine.
getaddrinfo = socket.getaddrinfo


class Refused(Exception):
    """A destination the guard refuses. The message names the host and why, never an answer."""


class Unresolvable(Refused):
    """The name does not resolve (refused at push; a retryable failure at delivery)."""


# --- Policy ---------------------------------------------------------------------


def allowed_networks() -> tuple[Network, ...]:
    return _parse(tuple(settings.IMPRI_CALLBACK_ALLOWED_NETWORKS))


@functools.lru_cache(maxsize=16)
def _parse(cidrs: tuple[str, ...]) -> tuple[Network, ...]:
    return tuple(ipaddress.ip_network(c, strict=False) for c in cidrs)


def embedded_ipv4(ip: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address stands for (mapped, compatible, 6to4, NAT64), if any."""
    if ip.version != 6:
        return None
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip in NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip in IPV4_COMPATIBLE and int(ip) > 1:  # not :: or ::1
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


# Why an address is not a public destination: the first test that holds names it.
_NOT_PUBLIC: tuple[tuple[Callable[[IPAddress], bool], str], ...] = (
    (lambda a: a.is_unspecified, "the unspecified address"),
    (lambda a: a.is_loopback, "a loopback address"),
    (lambda a: a.is_link_local, "a link-local address"),
    (lambda a: a in SHARED, "a shared (CGNAT) address"),
    (lambda a: a in UNIQUE_LOCAL, "a unique-local address"),
    (lambda a: a.is_multicast, "a multicast address"),
    (lambda a: a.is_private, "a private address"),
    (lambda a: a.is_reserved or not a.is_global, "a reserved address"),
)


def category(ip: IPAddress) -> str | None:
    """Why an address is not a public destination, or None if it is one."""
    for address in (ip, embedded_ipv4(ip)):
        if address is None:
            continue
        for holds, label in _NOT_PUBLIC:
            if holds(address):
                return label
    return None


def is_allowed(ip: IPAddress, networks: tuple[Network, ...]) -> bool:
    candidates = [ip] + ([v4] if (v4 := embedded_ipv4(ip)) is not None else [])
    return any(c in net for c in candidates for net in networks if c.version == net.version)


def is_loopback_name(host: str) -> bool:
    """``localhost``, ``localhost.`` and anything under ``.localhost`` (RFC 6761 §6.3)."""
    name = host.lower().rstrip(".")
    return name == "localhost" or name.endswith(".localhost")


def all_loopback_allowed(networks: tuple[Network, ...]) -> bool:
    return all(
        any(loop.version == net.version and loop.subnet_of(net) for net in networks)
        for loop in LOOPBACK
    )


def check_address(host: str, ip: IPAddress, networks: tuple[Network, ...]) -> None:
    reason = category(ip)
    if reason and not is_allowed(ip, networks):
        shown = host if host == str(ip) else f"{host} resolves to {ip}, which"
        raise Refused(f"{shown} is {reason}; Impri does not send to internal addresses")


def check_name(host: str, networks: tuple[Network, ...]) -> None:
    if not host:
        raise Refused("the URL has no host")
    if is_loopback_name(host) and not all_loopback_allowed(networks):
        raise Refused(
            f"{host} is a loopback name (RFC 6761); Impri does not send to internal addresses"
        )


def resolve(host: str, port: int) -> list[IPAddress]:
    """Every address the system resolver gives for ``host``, in its order, without repeats."""
    try:
        infos = getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    except (socket.gaierror, UnicodeError, ValueError) as exc:
        raise Unresolvable(f"{host} does not resolve") from exc
    found: list[IPAddress] = []
    for _family, _type, _proto, _name, sockaddr in infos:
        ip = ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0])
        if ip not in found:
            found.append(ip)
    if not found:
        raise Unresolvable(f"{host} does not resolve")
    return found


def checked_addresses(host: str, port: int) -> list[IPAddress]:
    """Resolve ``host`` and check every address; the addresses, or Refused."""
    networks = allowed_networks()
    check_name(host, networks)
    addresses = resolve(host, port)
    for ip in addresses:
        check_address(host, ip, networks)
    return addresses


def check_url(url: str) -> None:
    """Refuse a URL Impri must not send to (see the module docstring). Resolves the host."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise Refused(f"not a valid URL ({exc})") from None
    if parts.scheme not in ("http", "https"):
        raise Refused("must be an http:// or https:// URL")
    host = parts.hostname or ""
    checked_addresses(host, port or (443 if parts.scheme == "https" else 80))


# --- Connecting -------------------------------------------------------------------


class GuardedBackend(httpcore.NetworkBackend):
    """httpcore's network backend with the check at connect time.

    httpcore asks the backend for a TCP connection to the URL's host and
    keeps the host for TLS (SNI, certificate) and ``Host``: this backend
    resolves the name once, checks every address, and connects to a checked
    address, trying them in the resolver's order.
    """

    def __init__(self) -> None:
        self._inner = httpcore.SyncBackend()

    def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        try:
            addresses = checked_addresses(host, port)
        except Unresolvable as exc:
            raise httpcore.ConnectError(str(exc)) from exc  # DNS may come back: retry
        last: Exception | None = None
        for ip in addresses:
            try:
                return self._inner.connect_tcp(
                    str(ip),
                    port,
                    timeout=timeout,
                    local_address=local_address,
                    socket_options=socket_options,
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                last = exc
        assert last is not None
        raise last

    def connect_unix_socket(self, path, timeout=None, socket_options=None):
        raise Refused("Impri never sends to a unix socket")

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


class GuardedTransport(PoolTransport):
    """httpx's own transport over a pool that connects through :class:`GuardedBackend`.

    No proxy (an HTTP_PROXY from the environment would resolve names on our
    behalf, past the check) and no keep-alive (every request connects, so
    every request is checked against the allow-list as it is now). httpx takes
    no network backend, so the pool is handed over (``compat.httpx``).
    """

    def __init__(self) -> None:
        pool = httpcore.ConnectionPool(
            ssl_context=httpx.create_ssl_context(),
            max_connections=100,
            max_keepalive_connections=0,
            network_backend=GuardedBackend(),
        )
        super().__init__(pool, limits=httpx.Limits(max_keepalive_connections=0))


def client(user_agent: str) -> httpx.Client:
    """A client for agent- and admin-supplied URLs: guarded, no redirects, no proxy."""
    return httpx.Client(
        transport=GuardedTransport(),
        follow_redirects=False,
        trust_env=False,
        headers={"user-agent": user_agent},
    )
