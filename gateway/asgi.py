"""``/mcp/gateway/<name>``: each configured gateway's MCP server over streamable HTTP.

One ``MCPHttpApp`` (``approvals/mcp/http.py``: stateless, SSE, agent-key auth) per
gateway name, made on its first request; a name that is not an enabled
gateway is a 404 before any MCP machinery runs. The app holds no
configuration: the gateway's policies are read on every request.
"""

from __future__ import annotations

import asyncio
import importlib
import json

from plumbing import db_threads

from . import services
from .models import NAME_RE

GATEWAY_PREFIX = "/mcp/gateway/"
_apps: dict = {}  # name -> approvals.mcp.http.MCPHttpApp


async def gateway_app(scope, receive, send):
    name = scope["path"][len(GATEWAY_PREFIX) :].rstrip("/")
    if not NAME_RE.match(name) or not await db_threads.run(services.exists, name):
        return await _not_found(send, name)
    app = _apps.get(name)
    if app is None:
        # The MCP SDK loads with the first gateway request, not at start (impri.asgi's
        # MountedOnFirstCall says why), on a thread: the import takes a second or more.
        http = await asyncio.to_thread(importlib.import_module, "approvals.mcp.http")
        proxy = await asyncio.to_thread(importlib.import_module, "gateway.proxy")
        server = proxy.build_gateway_server(name, verifier=http.AgentKeyVerifier())
        app = _apps.setdefault(name, http.MCPHttpApp(server, path=GATEWAY_PREFIX + name))
    await app(scope, receive, send)


async def _not_found(send, name: str) -> None:
    body = json.dumps(
        {"detail": f"no enabled gateway named {name!r}", "code": "not_found", "field": "gateway"}
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 404,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
