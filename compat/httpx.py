"""httpx's private attribute Impri replaces: ``HTTPTransport._pool``.

``httpx.HTTPTransport`` builds its httpcore connection pool itself and offers no
way to give it another network backend. Impri's guard for agent- and
admin-supplied URLs (``plumbing.outbound``) must resolve, check and connect in
one place (an httpcore ``NetworkBackend``), so that a name that changes its answer
between the check and the connection reaches nothing new. So the transport's pool
is replaced by one built over that backend, and everything else (request and
response mapping, errors, timeouts) stays httpx's. Needed for correctness (the
SSRF guard), not speed.

Re-read ``httpx/_transports/default.py`` (``HTTPTransport.__init__`` and
``handle_request``, both use ``self._pool``) before moving ``WRITTEN_FOR``
(``tests/project/test_compat.py``).
"""

from __future__ import annotations

import httpcore
import httpx

WRITTEN_FOR = {"httpx": "0.29", "httpcore": "1.0"}
UPSTREAM = {"httpx._transports.default:HTTPTransport.__init__": "c5fe8f1eadf4fb49"}


class PoolTransport(httpx.HTTPTransport):
    """httpx's own transport over the httpcore ``pool`` it is given."""

    def __init__(self, pool: httpcore.ConnectionPool, **kwargs) -> None:
        super().__init__(**kwargs)
        self._pool = pool
