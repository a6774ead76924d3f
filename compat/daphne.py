"""daphne internals ``impri serve`` replaces: the server's listen callbacks.

``daphne.server.Server`` calls ``listen_success(port)`` and ``listen_error(failure)``
from its endpoints' Deferreds; they are not a documented hook. Daphne's own log the
address (INFO) and a port in use as a CRITICAL line, then stop. ``impri serve``
replaces both on the class, before daphne builds its server, so that it prints its
banner once the socket is bound and, when it cannot be, says which port to choose
instead. ``listen_success`` keeps daphne's one duty, recording the address in
``listening_addresses``. Needed for behaviour (what ``impri serve`` prints), not speed.

``twisted_loop`` is the event loop of the asyncio reactor daphne installs when
``daphne.server`` is first imported (a module global, not an API).

Re-read ``daphne/server.py`` (``Server.run``, ``listen_success``, ``listen_error``)
before moving ``WRITTEN_FOR`` (``tests/project/test_compat.py``).
"""

from __future__ import annotations

from collections.abc import Callable

WRITTEN_FOR = {"daphne": "4.2"}
UPSTREAM = {
    "daphne.server:Server.listen_success": "0aa2ef7d71380301",
    "daphne.server:Server.listen_error": "4fd283e70bafe3ad",
}


def on_listen(success: Callable[[], None], failure: Callable[[object], None]) -> None:
    """Have daphne's server call ``success()`` once bound, ``failure(failure)`` (then stop) if not."""
    from daphne.server import Server

    def listen_success(server, port) -> None:
        if hasattr(port, "getHost"):
            address = port.getHost()
            server.listening_addresses.append((address.host, address.port))
        success()

    def listen_error(server, reason) -> None:
        failure(reason)
        server.stop()

    Server.listen_success = listen_success
    Server.listen_error = listen_error


def twisted_loop():
    """The asyncio event loop under daphne's Twisted reactor."""
    import daphne.server

    return daphne.server.twisted_loop
