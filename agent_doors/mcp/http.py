"""MCP over streamable HTTP at ``/mcp``, inside the ASGI app that daphne serves.

The SDK's app needs its session manager running (``session_manager.run()``)
even in stateless mode, and normally starts it from the ASGI lifespan, which
daphne never sends. So ``MCPHttpApp``:

1. starts the manager in a long-lived task on the first request (and also on
   a real ``lifespan.startup``, so uvicorn works too); ``impri.asgi`` imports this
   module (and the SDK) with that first request, not at start;
2. stops it in Twisted's "before shutdown" phase, so on SIGTERM every wait in
   flight is cancelled while the loop still runs and cleans up (leaves its
   channel-layer group; its action stays as it was) before daphne exits;
3. reads the request body before the SDK sees it, so ``impri.asgi.BodyLimit``
   can still answer 413 for an oversized chunked body;
4. turns a rate-limited key into 429 instead of the SDK's 401;
5. answers a body that doesn't read one way (a duplicate key, nesting past 128
   levels: ``jsonrpc.json_rpc_refusal``) with a JSON-RPC parse error, 400, once the
   SDK has checked the key: the SDK itself never reads that body.

Stateless (any daphne process serves any request, no sticky sessions) and SSE
responses (progress notifications and the SDK's pings reach the client while
a wait runs, and a client that hangs up cancels it). Auth is the SDK's token
verifier over Impri keys: only agent keys pass, a reviewer token is a 401.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
import sys
from collections import deque

from django.conf import settings
from mcp.server.auth.provider import AccessToken, TokenVerifier
from mcp.server.transport_security import TransportSecuritySettings
from twisted.internet import defer

from approvals.errors import RateLimited
from identity import keys
from plumbing.database import database_sync_to_async

from . import AGENT_SCOPE, AgentAccessToken, build_server, settle_waits
from .jsonrpc import json_rpc_refusal

logger = logging.getLogger(__name__)

MCP_PATH = "/mcp"

# Set per request by MCPHttpApp; the verifier records a rate-limit refusal here.
_refusals: contextvars.ContextVar[list[RateLimited] | None] = contextvars.ContextVar(
    "impri_mcp_refusals", default=None
)


class AgentKeyVerifier(TokenVerifier):
    """The SDK's token verifier over Impri keys: only active agent keys pass.

    A reviewer token is not an agent key, so it is refused like an unknown key.
    """

    async def verify_token(self, token: str) -> AccessToken | None:
        try:
            principal = await database_sync_to_async(keys.authenticate)(token)
        except RateLimited as exc:
            refusals = _refusals.get()
            if refusals is None:
                raise
            refusals.append(exc)
            return None
        if principal is None or principal.agent is None:
            return None
        return AgentAccessToken(
            token=principal.key.prefix,  # the secret itself is not kept around
            client_id=principal.agent.name,
            scopes=[AGENT_SCOPE],
            principal=principal,
        )


def transport_security(allowed_hosts: list[str], trusted_origins: list[str]):
    """DNS-rebinding protection that accepts the hosts Django accepts.

    The SDK matches exact hosts and ``host:*`` ports; Django's ``*`` switches the
    check off, and a ``.example.com`` entry can only allow ``example.com`` itself.
    """
    if "*" in allowed_hosts:
        return TransportSecuritySettings(enable_dns_rebinding_protection=False)
    hosts: list[str] = []
    origins: list[str] = list(trusted_origins)
    for entry in allowed_hosts:
        host = entry.lstrip(".")
        if entry.startswith("."):
            logger.warning(
                "ALLOWED_HOSTS entry %s: /mcp accepts %s itself, not its subdomains; "
                "list each subdomain that serves MCP",
                entry,
                host,
            )
        hosts += [host, f"{host}:*"]
        origins += [
            f"{scheme}://{host}{port}" for scheme in ("http", "https") for port in ("", ":*")
        ]
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=origins
    )


class MCPHttpApp:
    def __init__(self, server, path: str = MCP_PATH):
        self.path = path
        self.asgi = server.streamable_http_app(
            streamable_http_path=path,
            stateless_http=True,
            json_response=False,
            transport_security=transport_security(
                settings.ALLOWED_HOSTS, settings.CSRF_TRUSTED_ORIGINS
            ),
            max_request_body_size=settings.IMPRI_MAX_BODY_BYTES,
        )
        # Only exists once streamable_http_app() has been called.
        self.session_manager = server.session_manager
        self._started: asyncio.Future | None = None
        self._stopping: asyncio.Event | None = None
        self._task: asyncio.Task | None = None

    async def __call__(self, scope, receive, send):
        if scope["type"] == "lifespan":
            return await self._lifespan(receive, send)
        if scope["type"] == "http" and scope["method"] not in ("POST", "OPTIONS"):
            # Stateless: no session, so no standalone server-to-client stream (GET)
            # and nothing to end (DELETE). The spec allows 405 for both; the SDK
            # would otherwise hold a GET open forever, one descriptor each.
            return await _send_json(
                send,
                405,
                {"detail": "MCP here is stateless: POST JSON-RPC to /mcp", "code": "method"},
                headers=[(b"allow", b"POST")],
            )
        await self.start()
        if scope["path"] == self.path + "/":
            scope = {**scope, "path": self.path, "raw_path": self.path.encode()}
        messages = await _read_body_first(receive)
        refused = None
        if scope["type"] == "http" and scope["method"] == "POST":
            refused = json_rpc_refusal(b"".join(m.get("body", b"") for m in messages))
        refusals: list[RateLimited] = []
        reset = _refusals.set(refusals)
        send = _answer_429_when_refused(_json_errors(send), refusals)
        try:
            if refused is None:
                await self.asgi(scope, _replay(messages, receive), send)
            else:
                await self.asgi(scope, *_refuse_once_read(messages, receive, send, refused))
        finally:
            _refusals.reset(reset)

    async def start(self) -> None:
        """Start the session manager once; every request waits until it runs."""
        if self._started is None:
            loop = asyncio.get_running_loop()
            self._started = loop.create_future()
            self._stopping = asyncio.Event()
            self._task = loop.create_task(self._run(), name="impri-mcp-session-manager")
            _stop_before_reactor_shutdown(self)
        await asyncio.shield(self._started)

    async def stop(self) -> None:
        """Stop the manager: cancels the waits in flight, which leave their actions untouched."""
        if self._task is None or self._task.done():
            return
        self._stopping.set()
        await self._task
        await settle_waits()

    async def _run(self) -> None:
        try:
            async with self.session_manager.run():
                self._started.set_result(None)
                await self._stopping.wait()
        except BaseException as exc:
            if not self._started.done():
                self._started.set_exception(exc)
            raise
        logger.info("MCP session manager stopped")

    async def _lifespan(self, receive, send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await self.start()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.stop()
                await send({"type": "lifespan.shutdown.complete"})
                return


def _stop_before_reactor_shutdown(app: MCPHttpApp) -> None:
    """Under daphne, stop the manager in Twisted's "before shutdown" phase (SIGTERM, Ctrl-C)."""
    reactor = sys.modules.get("twisted.internet.reactor")
    if reactor is None or not getattr(reactor, "running", False):
        return

    reactor.addSystemEventTrigger(
        "before", "shutdown", lambda: defer.Deferred.fromFuture(asyncio.ensure_future(app.stop()))
    )


async def _read_body_first(receive):
    """Read the whole request body now and replay it to the SDK.

    ``BodyLimit`` raises from ``receive`` when a chunked body passes the limit:
    raised here it reaches ``BodyLimit``, which answers 413; raised inside the
    SDK's Starlette app it would become a 500. The SDK buffers the body anyway.
    After the body, ``receive`` is the server's again (``_replay``), so the SDK still
    hears ``http.disconnect`` and cancels the call of a client that hung up.
    """
    body: deque = deque()
    while True:
        message = await receive()
        body.append(message)
        if message["type"] != "http.request" or not message.get("more_body", False):
            break
    return body


def _replay(body: deque, receive):
    async def replay():
        return body.popleft() if body else await receive()

    return replay


def _refuse_once_read(body: deque, receive, send, refusal: dict):
    """``receive`` and ``send`` for the SDK when the body doesn't read one way.

    The SDK reads the body only once it has checked the key (a caller without one
    still learns nothing but 401); it is handed an empty body instead, and whatever
    it answers to that is replaced with ``refusal``.
    """
    read = answered = False
    if body and body[-1]["type"] == "http.request":
        body = deque([{"type": "http.request", "body": b"", "more_body": False}])
    replay = _replay(body, receive)

    async def guarded_receive():
        nonlocal read
        message = await replay()
        read = read or message["type"] == "http.request"
        return message

    async def refusing_send(message):
        nonlocal answered
        if not read:
            return await send(message)  # answered before the body: 401, 406, 421…
        if message["type"] == "http.response.start":
            answered = True
            return await _send_json(send, 400, refusal)
        return None if answered else await send(message)

    return guarded_receive, refusing_send


def _json_errors(send):
    """The SDK answers some refusals (a bad Host, Content-Type or Origin) in plain text: make them JSON."""
    pending: dict | None = None
    text = b""

    async def json_send(message):
        nonlocal pending, text
        if message["type"] == "http.response.start":
            headers = dict(message.get("headers", []))
            if message["status"] >= 400 and not headers.get(b"content-type", b"").startswith(
                b"application/json"
            ):
                pending = message
                return None
            return await send(message)
        if pending is None or message["type"] != "http.response.body":
            return await send(message)
        text += message.get("body", b"")
        if message.get("more_body"):
            return None
        detail = text.decode("utf-8", "replace").strip()[:500] or "refused"
        return await _send_json(send, pending["status"], {"detail": detail, "code": "refused"})

    return json_send


def _answer_429_when_refused(send, refusals: list[RateLimited]):
    replaced = False

    async def guarded_send(message):
        nonlocal replaced
        if replaced:
            return None  # the body of the plain-text error we answered as JSON instead
        if not refusals:
            if message["type"] == "http.response.start" and message["status"] >= 500:
                # Starlette answers an unexpected error (the database away during the
                # key check, say) with a text/plain 500: the API speaks JSON only.
                replaced = True
                return await _send_json(send, 503, _UNAVAILABLE)
            return await send(message)
        if message["type"] != "http.response.start":
            return None  # the body of the 401 the SDK answered instead
        body = json.dumps(refusals[0].as_dict()).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 429,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"retry-after", str(refusals[0].retry_after).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})

    return guarded_send


mcp_app = MCPHttpApp(build_server(verifier=AgentKeyVerifier()))


_UNAVAILABLE = {
    "detail": "Impri could not answer this request (a dependency is unavailable); retry shortly",
    "code": "unavailable",
}


async def _send_json(send, status: int, body: dict, headers: list | None = None) -> None:
    data = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(data)).encode()),
                (b"cache-control", b"no-store"),
                *(headers or []),
            ],
        }
    )
    await send({"type": "http.response.body", "body": data})
