"""httpx's private attribute Impri replaces: ``HTTPTransport._pool``.

Reason: ``httpx.HTTPTransport`` builds its httpcore connection pool itself and offers no
way to give it another network backend. Impri's guard for agent- and admin-supplied URLs
(``plumbing.outbound``) must resolve, check and connect in one place (an httpcore
``NetworkBackend``), so that a name that changes its answer between the check and the
connection reaches nothing new. So the transport's pool is replaced by one built over that
backend, and everything else (request and response mapping, errors, timeouts) stays
httpx's. Needed for correctness (the SSRF guard), not speed.

Relies on: ``HTTPTransport.handle_request`` sending through ``self._pool``.
``tests/project/test_compat.py`` sends through a pool with a recording backend, and checks
that the guarded client refuses a loopback address outside the allow-list (127.0.0.2 with
only 127.0.0.1 allowed) while a server listens there.

Exit plan: when httpx takes a network backend (or a ready pool) in ``HTTPTransport``'s
constructor (encode/httpx discussions on custom network backends), pass ``GuardedBackend``
there and delete this module; or write the transport on httpcore's public
``ConnectionPool`` directly (an ``httpx.BaseTransport`` mapping requests and errors, about
60 lines), if httpx never does.
"""

from __future__ import annotations

import httpcore
import httpx


class PoolTransport(httpx.HTTPTransport):
    """httpx's own transport over the httpcore ``pool`` it is given."""

    def __init__(self, pool: httpcore.ConnectionPool, **kwargs) -> None:
        super().__init__(**kwargs)
        self._pool = pool
