"""``/mcp/gateway/<name>``: each configured gateway's MCP server over streamable HTTP.

One ``MCPHttpApp`` (``agent_doors/mcp/http.py``: stateless, SSE, agent-key auth) per
gateway name, made on its first request. The app holds no configuration: the
gateway's policies are read on every request.

A name that is not an enabled gateway is a 404 only to a caller with an agent
key. Without one, the request is answered by the app of :data:`MISSING` (a name
no gateway can have) exactly as a gateway answers it (401, 405, 429), so
gateway names cannot be probed without a key.
"""

from __future__ import annotations

import asyncio
import json

from approvals.errors import RateLimited
from identity import keys
from plumbing.database import database_sync_to_async

from . import services
from .models import NAME_RE

GATEWAY_PREFIX = "/mcp/gateway/"
MISSING = "-"  # outside NAME_RE: the app that answers callers without a key for unknown names
_apps: dict = {}  # name -> agent_doors.mcp.http.MCPHttpApp


async def gateway_app(scope, receive, send):
    name = scope["path"][len(GATEWAY_PREFIX) :].rstrip("/")
    if not NAME_RE.fullmatch(name) or not await database_sync_to_async(services.exists)(name):
        if await _has_agent_key(scope):
            return await _not_found(send, name)
        path = GATEWAY_PREFIX + MISSING
        name, scope = MISSING, {**scope, "path": path, "raw_path": path.encode()}
    app = _apps.get(name)
    if app is None:
        # On a thread: the first import of the MCP SDK takes a second or more.
        mcp_http_app, verifier, build_gateway_server = await asyncio.to_thread(_load_mcp)
        server = build_gateway_server(name, verifier=verifier())
        app = _apps.setdefault(name, mcp_http_app(server, path=GATEWAY_PREFIX + name))
    await app(scope, receive, send)


def _load_mcp():
    """The MCP SDK's app and this gateway's server, with the first gateway request (as
    impri.asgi's MountedOnFirstCall mounts /mcp): serve starts without the SDK."""
    # deferred: the MCP SDK, never at serve's start (tests/project/test_serve_footprint.py)
    from agent_doors.mcp.http import AgentKeyVerifier, MCPHttpApp

    # deferred: the MCP SDK, never at serve's start (tests/project/test_serve_footprint.py)
    from .proxy import build_gateway_server

    return MCPHttpApp, AgentKeyVerifier, build_gateway_server


async def _has_agent_key(scope) -> bool:
    """The request carries an active agent key (a refused or rate-limited one is not)."""
    header = dict(scope.get("headers") or ()).get(b"authorization", b"")
    scheme, _, token = header.decode("latin-1").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return False
    try:
        principal = await database_sync_to_async(keys.authenticate)(token.strip())
    except RateLimited:
        return False  # the gateway's own answer to it (429) comes from the app
    return principal is not None and principal.agent is not None


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
