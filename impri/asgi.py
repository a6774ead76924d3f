"""ASGI entry point: Django over HTTP, the inbox websocket, MCP at /mcp and /mcp/gateway/<name>."""

from __future__ import annotations

import asyncio
import importlib
import json
import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "impri.settings")

import django  # noqa: E402
from django.conf import settings  # noqa: E402
from django.core.handlers.asgi import ASGIHandler  # noqa: E402

django.setup(set_prefix=False)

from django.utils.module_loading import import_string  # noqa: E402

from approvals.api import api as rest_api  # noqa: E402
from approvals.api.longpoll import DecisionLongPoll  # noqa: E402
from compat.django import LoopSignalsASGIHandler  # noqa: E402

# Paths whose views are async and do their database work on plumbing.db_threads's
# bounded pool: they need no thread of their own.
THREADLESS_PREFIXES = ("/api/", "/readyz", "/healthz")


class ApiASGIHandler(LoopSignalsASGIHandler):
    """Django's ASGI handler for the API: no thread per request, and its own middleware.

    Django gives every request a ``ThreadSensitiveContext``: its own thread,
    created on the request's first sync call and kept until the request ends,
    with that thread's database connection. For a long-poll of minutes that is
    one idle thread and one connection per waiting agent, and for every other
    call a thread created and torn down. The API is async end to end (async
    key check, views that run their body in one call on ``plumbing.db_threads``'s
    bounded pool, waits on the waiter hub), so it needs no such context.

    The request signals are sent on the loop (``compat.django``: Django's
    ``handle`` sends them through two hops to the process's shared sync thread).
    Their receivers act on the calling thread's connections and caches, and an
    API request opens none on the loop's thread: its database work runs on
    ``plumbing.db_threads``'s pool, which gives its connections back after
    every call.

    Its middleware is ``IMPRI_API_MIDDLEWARE``, not the inbox's stack: sessions,
    CSRF, messages and the rest are for browsers, and each of Django's classic
    middleware hops to a thread twice per request under an async view.
    """

    middleware_setting = "IMPRI_API_MIDDLEWARE"


class ImpriASGIHandler(ASGIHandler):
    """Django for the inbox and admin; the API (and probes) go to ``ApiASGIHandler``.

    ``longpoll`` serves the decision long-poll, where agents wait by the thousand
    (``http_router`` sends it there), with the API's own middleware hooks, response
    and handler, and falls back to ``ApiASGIHandler`` for anything else.
    """

    def __init__(self):
        super().__init__()
        self.api = ApiASGIHandler()
        self.longpoll = DecisionLongPoll(
            self.api.handle,
            middleware=[
                import_string(path)(_never_called) for path in settings.IMPRI_API_MIDDLEWARE
            ],
            create_response=rest_api.create_response,
            on_exception=rest_api.on_exception,
            send_response=self.api.send_response,
        )

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["path"].startswith(THREADLESS_PREFIXES):
            return await self.api.handle(scope, receive, send)
        return await super().__call__(scope, receive, send)


def _never_called(request):
    """The ``get_response`` of the middleware whose hooks the long-poll calls itself."""
    raise AssertionError("the long-poll calls the middleware's before and after only")


django_asgi = ImpriASGIHandler()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from approvals import events  # noqa: E402
from gateway.asgi import GATEWAY_PREFIX, gateway_app  # noqa: E402
from impri.logs import AccessLog  # noqa: E402
from impri.security import ExactOriginValidator  # noqa: E402
from inbox.routing import websocket_urlpatterns  # noqa: E402
from plumbing.middleware import too_large  # noqa: E402

# approvals.mcp.http.MCP_PATH, without importing the MCP SDK (tests hold the two equal).
MCP_PATH = "/mcp"


class MountedOnFirstCall:
    """The ASGI app at ``module:name``, imported by its first call instead of at start.

    For the MCP server (``approvals.mcp.http.mcp_app``): the SDK and its web stack
    (mcp, mcp-types, starlette, uvicorn, sse-starlette, httpx2: about 19 MB of a serve
    process, issue 34) load with the first request to /mcp, or with ``lifespan.startup``
    on a server that sends it. The import runs on a thread (it takes a second or more on a
    busy machine, and the loop keeps serving meanwhile); concurrent first calls
    get the same app, since Python imports a module once, and the app starts its
    session manager once (``MCPHttpApp.start``).
    """

    def __init__(self, target: str):
        self.target = target
        self.app = None

    async def __call__(self, scope, receive, send):
        if self.app is None:
            module, name = self.target.split(":")
            loaded = await asyncio.to_thread(importlib.import_module, module)
            self.app = getattr(loaded, name)
        return await self.app(scope, receive, send)


mcp_app = MountedOnFirstCall("approvals.mcp.http:mcp_app")


class BodyLimit:
    """Refuse HTTP bodies over ``IMPRI_MAX_BODY_BYTES`` with 413, counting as they stream.

    A declared Content-Length is checked before any byte is read; a chunked body
    is counted and cut off as soon as it passes the limit, so nobody can make
    the server buffer an unbounded upload.
    """

    def __init__(self, app, limit: int | None = None):
        self.app = app
        self._limit = limit

    @property
    def limit(self) -> int:
        """``IMPRI_MAX_BODY_BYTES`` (the one body limit), unless a fixed one was given."""
        return settings.IMPRI_MAX_BODY_BYTES if self._limit is None else self._limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        limit = self.limit
        for name, value in scope.get("headers", []):
            if name == b"content-length" and value.isdigit() and int(value) > limit:
                return await self._refuse(send, limit)
        received = 0
        started = False

        async def counting_receive():
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise _TooLarge
            return message

        async def tracking_send(message):
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counting_receive, tracking_send)
        except _TooLarge:
            if not started:
                await self._refuse(send, limit)

    async def _refuse(self, send, limit: int):
        body = json.dumps(too_large(limit)).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


class _TooLarge(Exception):
    pass


async def http_router(scope, receive, send):
    """/mcp goes to the MCP app (never through Django's handler), the rest to Django.

    The decision long-poll goes to ``approvals.api.longpoll`` (which hands anything it
    doesn't serve to Django's API handler).
    """
    if events.serving_loop is None:
        events.serving_loop = asyncio.get_running_loop()
    if scope["path"] in (MCP_PATH, MCP_PATH + "/"):
        return await mcp_app(scope, receive, send)
    if scope["path"].startswith(GATEWAY_PREFIX):
        return await gateway_app(scope, receive, send)
    if DecisionLongPoll.matches(scope):  # one coroutine frame fewer a waiting agent
        return await django_asgi.longpoll(scope, receive, send)
    return await django_asgi(scope, receive, send)


application = ProtocolTypeRouter(
    {
        "http": AccessLog(BodyLimit(http_router)),
        "websocket": ExactOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
        # daphne sends no lifespan; a server that does (uvicorn) starts MCP with it.
        "lifespan": mcp_app,
    }
)
