"""ASGI entry point: Channels' routers over Django's own ASGI handler.

HTTP: MCP at /mcp and /mcp/gateway/<name>, the decision long-poll's consumer
(``waiting.consumers``), and Django (the API, the inbox, the admin) for the rest;
websockets: the inbox's consumers.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "impri.settings")

from django.core.asgi import get_asgi_application  # noqa: E402

# Django's own ASGI handler (it calls django.setup()), before anything imports a model.
django_asgi = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.conf import settings  # noqa: E402
from django.urls import re_path  # noqa: E402

from approvals import events  # noqa: E402
from gateway.asgi import GATEWAY_PREFIX, gateway_app  # noqa: E402
from impri.logs import AccessLog  # noqa: E402
from impri.security import ExactOriginValidator  # noqa: E402
from inbox.routing import websocket_urlpatterns  # noqa: E402
from plumbing import database  # noqa: E402
from plumbing.middleware import too_large  # noqa: E402
from waiting.consumers import DecisionConsumer  # noqa: E402

# agent_doors.mcp.http.MCP_PATH, without importing the MCP SDK (tests hold the two equal).
MCP_PATH = "/mcp"


class MountedOnFirstCall:
    """The ASGI app at ``module:name``, imported by its first call instead of at start.

    For the MCP server (``agent_doors.mcp.http.mcp_app``): the SDK and its web stack
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


mcp_app = MountedOnFirstCall("agent_doors.mcp.http:mcp_app")


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


# HTTP, first match wins: MCP (never through Django's handler), the decision long-poll's
# consumer, then Django.
http_routes = URLRouter(
    [
        re_path(rf"^{MCP_PATH[1:]}/?$", mcp_app),
        re_path(rf"^{GATEWAY_PREFIX[1:]}", gateway_app),
        re_path(r"^api/v1/actions/(?P<action_id>[^/\x00]+)/decision$", DecisionConsumer.as_asgi()),
        re_path(r"", django_asgi),
    ]
)


async def http_router(scope, receive, send):
    """Channels' URL router, once the serving loop is known (``approvals.events``,
    ``plumbing.database``)."""
    if events.serving_loop is None:
        events.serving_loop = asyncio.get_running_loop()
        database.serving_on(events.serving_loop)
    return await http_routes(scope, receive, send)


application = ProtocolTypeRouter(
    {
        "http": AccessLog(BodyLimit(http_router)),
        "websocket": ExactOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
        # daphne sends no lifespan; a server that does (uvicorn) starts MCP with it.
        "lifespan": mcp_app,
    }
)
