"""daphne internals ``impri serve`` replaces: the server's listen callbacks.

``daphne.server.Server`` calls ``listen_success(port)`` and ``listen_error(failure)``
from its endpoints' Deferreds; they are not a documented hook. Daphne's own log the
address (INFO) and a port in use as a CRITICAL line, then stop. ``impri serve``
replaces both on the class, before daphne builds its server, so that it prints its
banner once the socket is bound and, when it cannot be, says which port to choose
instead. ``listen_success`` keeps daphne's one duty, recording the address in
``listening_addresses``. Needed for behaviour (what ``impri serve`` prints), not speed.

``light_input_queues()`` replaces ``Server.create_application`` with a copy that gives
each application instance a :class:`InputQueue` instead of an ``asyncio.Queue``: daphne
makes one per request and keeps it for as long as the request is open, and an
``asyncio.Queue`` is four deques and an ``Event`` (about 3 KB) for the one or two
messages a request ever receives. Needed for memory per waiting agent (issue 34).

``twisted_loop`` is the event loop of the asyncio reactor daphne installs when
``daphne.server`` is first imported (a module global, not an API).

Re-read ``daphne/server.py`` (``Server.run``, ``listen_success``, ``listen_error``,
``create_application``) and the protocols' uses of ``application_queue``
before moving ``WRITTEN_FOR`` (``tests/project/test_compat.py``).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from functools import partial

WRITTEN_FOR = {"daphne": "4.2"}
UPSTREAM = {
    "daphne.server:Server.listen_success": "0aa2ef7d71380301",
    "daphne.server:Server.listen_error": "4fd283e70bafe3ad",
    "daphne.server:Server.create_application": "f1e300b4ecf636c8",
    # The queue's users: put_nowait, and a truth test before it.
    "daphne.http_protocol:WebRequest.process": "e9babd1c97ce710b",
    "daphne.http_protocol:WebRequest.connectionLost": "9276daf5807184c8",
    "daphne.http_protocol:WebRequest.finish": "7e03ef03e35b5b66",
    "daphne.http_protocol:WebRequest.send_disconnect": "9b72cc5511c4c1ba",
    "daphne.ws_protocol:WebSocketProtocol.applicationCreateWorked": "4004f76cd6028e06",
    "daphne.ws_protocol:WebSocketProtocol.onMessage": "826cc86d0e2aeef0",
    "daphne.ws_protocol:WebSocketProtocol.onClose": "4d3b4d7c66afc2ba",
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


class InputQueue:
    """What daphne's protocols need of an application's input queue, and no more.

    ``put_nowait`` (the protocols), ``get`` (the application's ``receive``) and a true
    truth value (``if self.application_queue:``). One getter at a time, as an ASGI
    application reads; its deque and future exist only while they hold something.
    A message handed to a getter that is cancelled before it runs goes back to the
    front: nothing is lost, as with ``asyncio.Queue``.
    """

    __slots__ = ("_items", "_getter")

    def __init__(self) -> None:
        self._items: deque | None = None
        self._getter: asyncio.Future | None = None

    def __bool__(self) -> bool:
        return True

    def put_nowait(self, item) -> None:
        getter = self._getter
        if getter is not None and not getter.done():
            self._getter = None
            getter.set_result(item)
            return
        if self._items is None:
            self._items = deque()
        self._items.append(item)

    async def get(self):
        if self._items:
            item = self._items.popleft()
            if not self._items:
                self._items = None
            return item
        if self._getter is not None and not self._getter.done():
            raise RuntimeError("InputQueue: one getter at a time")
        getter = self._getter = asyncio.get_running_loop().create_future()
        try:
            return await getter
        except asyncio.CancelledError:
            if self._getter is getter:
                self._getter = None
            if getter.done() and not getter.cancelled():
                # Handed over, but never taken: to the getter parked since, else back in front.
                waiting = self._getter
                if waiting is not None and not waiting.done():
                    self._getter = None
                    waiting.set_result(getter.result())
                else:
                    if self._items is None:
                        self._items = deque()
                    self._items.appendleft(getter.result())
            raise


def light_input_queues() -> None:
    """Have daphne's server give each application instance an :class:`InputQueue`."""
    from daphne.server import Server

    def create_application(server, protocol, scope):
        # daphne 4.2's create_application, with InputQueue for asyncio.Queue.
        assert "application_instance" not in server.connections[protocol]
        input_queue = InputQueue()
        scope.setdefault("asgi", {"version": "3.0"})
        application_instance = server.application(
            scope=scope,
            receive=input_queue.get,
            send=partial(server.handle_reply, protocol),
        )
        if protocol not in server.connections:
            return None
        server.connections[protocol]["application_instance"] = asyncio.ensure_future(
            application_instance,
            loop=asyncio.get_event_loop(),
        )
        return input_queue

    Server.create_application = create_application
