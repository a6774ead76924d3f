"""The MCP server's side of the tools: identity, error mapping, the waits' own tasks.

``ImpriMCPServer`` authenticates each call (the bearer key of the HTTP request,
or ``api_key`` for stdio and tests) and turns domain errors into tool results
with ``isError: true``: REST's message in the text, REST's status in ``_meta``.
The helpers here are shared by Impri's tools (``agent_doors.mcp.tools``) and the
gateway's proxying server.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from typing import Any

from django.conf import settings
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken, TokenVerifier
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, Field, ValidationError

from approvals.errors import Forbidden, ImpriError, InvalidInput, NotAuthenticated
from approvals.models import Action
from identity import keys
from plumbing import public_url
from plumbing.database import database_sync_to_async

from .stdio import serve

logger = logging.getLogger(__name__)

AGENT_SCOPE = "impri:agent"


def agent_auth(verifier: TokenVerifier | None) -> AuthSettings | None:
    """A streamable HTTP server's bearer check: an agent key of this Impri; none on stdio."""
    if verifier is None:
        return None
    return AuthSettings(
        issuer_url=public_url.base_url(), resource_server_url=None, required_scopes=[AGENT_SCOPE]
    )


ERROR_META_KEY = "impri/error"


# --- Identity ----------------------------------------------------------------------


class AgentAccessToken(AccessToken):
    """The SDK's access token carrying the caller ``keys.authenticate`` found.

    ``agent_doors.mcp.http``'s token verifier issues it; the tools read it back with
    ``get_access_token()``.
    """

    principal: Any = Field(default=None, exclude=True)


class ImpriMCPServer(MCPServer):
    """``MCPServer`` with Impri's identity and error mapping.

    With ``api_key`` (stdio, tests) every call authenticates that key again, so a
    key revoked mid-session stops working at once. Without it the caller is
    the bearer key of the HTTP request.
    """

    def __init__(self, *, api_key: str | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.api_key = api_key
        self._arguments: dict[str, frozenset[str]] = {}

    def register(self, fn, *, title: str, annotations: ToolAnnotations) -> None:
        self.add_tool(fn, title=title, annotations=annotations)
        self._arguments[fn.__name__] = frozenset(inspect.signature(fn).parameters) - {"ctx"}

    async def run_stdio_async(self) -> None:
        """The SDK's stdio transport, each line read one way first (``agent_doors.mcp.stdio``)."""
        await serve(self)

    async def call_tool(self, name: str, arguments: dict[str, Any], context=None):
        # Like REST's extra="forbid": a misspelt argument is refused, not dropped.
        unknown = sorted(set(arguments) - self._arguments.get(name, set(arguments)))
        if unknown:
            known = ", ".join(sorted(self._arguments[name]))
            problem = f"unknown argument; the arguments are {known}"
            return error_result(InvalidArguments([(arg, problem) for arg in unknown]))
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            # The SDK wraps what a tool raises; __cause__ is the original.
            cause = exc.__cause__
            if isinstance(cause, ValidationError) and not isinstance(exc, UnexpectedToolError):
                cause = invalid(cause)  # the arguments did not fit the input schema
            if not isinstance(cause, ImpriError):
                raise
            logger.info("%s refused (%s): %s", name, cause.status_code, cause.message)
            return error_result(cause)


async def current_agent(ctx: Context):
    server = ctx.mcp_server
    if getattr(server, "api_key", None) is not None:
        principal = await database_sync_to_async(keys.authenticate)(server.api_key)
    else:
        token = get_access_token()
        principal = token.principal if isinstance(token, AgentAccessToken) else None
    if principal is None:
        raise NotAuthenticated(
            "missing, unknown or revoked key: send Authorization: Bearer <agent key> "
            "(stdio: set IMPRI_API_KEY)"
        )
    if principal.agent is None:
        raise Forbidden("these tools need an agent key; a reviewer token cannot act as an agent")
    return principal.agent


# --- Errors --------------------------------------------------------------------------

_LABELS = {
    401: "Not authenticated",
    403: "Forbidden",
    404: "Not found",
    409: "Conflict",
    422: "Invalid input",
    429: "Rate limited",
}


def error_result(exc: ImpriError) -> CallToolResult:
    """The tool error for a domain error: REST's message, REST's status in ``_meta``."""
    label = _LABELS.get(exc.status_code, "Error")
    return CallToolResult(
        content=[TextContent(type="text", text=f"{label}: {exc.message}")],
        is_error=True,
        _meta={ERROR_META_KEY: {"status": exc.status_code, **exc.as_dict()}},
    )


class InvalidArguments(InvalidInput):
    """Every problem pydantic found, ``field: message; …``, named after the first field."""

    def __init__(self, problems: list[tuple[str, str]]):
        field = problems[0][0] if problems else "arguments"
        message = "; ".join(f"{f}: {m}" for f, m in problems) or "arguments: invalid"
        ImpriError.__init__(self, message, field=field)


def invalid(exc: ValidationError) -> InvalidArguments:
    """Worded like the REST API's 422, so both adapters refuse input alike."""
    return InvalidArguments([_describe(error) for error in exc.errors()])


def _describe(error) -> tuple[str, str]:
    loc = ".".join(str(part) for part in error.get("loc", ()))
    message = error.get("msg", "invalid")
    if message.startswith("Value error, "):
        message = message[len("Value error, ") :]
        field, sep, rest = message.partition(": ")
        if sep and " " not in field and (not loc or field == loc or field.startswith(loc + ".")):
            return field, rest
    return loc or "arguments", message


def _parse(model: type[BaseModel], data: dict) -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise invalid(exc) from None


# --- Helpers -------------------------------------------------------------------------


def _base_url(ctx: Context) -> str:
    """Where links point: the HTTP request's own origin, else serve's defaults (stdio)."""
    request = ctx.request_context.request
    if request is None or not hasattr(request, "headers"):
        return public_url.base_url() + "/"
    scheme = request.url.scheme
    proxy = settings.SECURE_PROXY_SSL_HEADER
    if proxy:
        header = proxy[0].removeprefix("HTTP_").replace("_", "-").lower()
        if request.headers.get(header) == proxy[1]:
            scheme = "https"
    return f"{scheme}://{request.headers.get('host', request.url.netloc)}/"


def _wants_progress(ctx: Context) -> bool:
    meta = ctx.request_context.meta or {}
    return meta.get("progress_token") is not None


def _elapsed(seconds: float) -> str:
    if seconds < 60:
        return f"{int(seconds)} s"
    minutes = int(seconds // 60)
    if minutes < 60:
        return f"{minutes} min"
    return f"{minutes // 60} h {minutes % 60} min"


_waits: set[asyncio.Task] = set()


async def in_own_task(coro):
    """Await ``coro`` in a plain asyncio task that is cancelled once when we are.

    The SDK cancels a tool (client hung up, server stopping) through an anyio
    cancel scope, which cancels every await inside it, the wait's cleanup
    included: it would never leave its channel-layer group. A plain task gets
    a single CancelledError and runs its ``finally`` blocks to the end.
    """
    task = asyncio.ensure_future(coro)
    _waits.add(task)
    task.add_done_callback(_waits.discard)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        task.cancel()
        raise


async def settle_waits(timeout_s: float = 5.0) -> None:
    """Let cancelled waits finish their cleanup (on shutdown, before the loop stops)."""
    if _waits:
        await asyncio.wait(list(_waits), timeout=timeout_s)


def _wait_seconds(requested: float | None, *, progress: bool) -> float:
    """Honour the request up to IMPRI_MAX_AWAIT_S; without a progress token stop near
    IMPRI_MCP_AWAIT_CAP_S, because most clients give up on a silent call at 60 s."""
    limit = float(settings.IMPRI_MAX_AWAIT_S)
    if not progress:
        limit = min(limit, settings.IMPRI_MCP_AWAIT_CAP_S)
    return limit if requested is None else min(requested, limit)


def _progress_reporter(ctx: Context, action: Action, wait: float):
    group = action.review_group.name if action.review_group else "the default group"

    async def report(elapsed: float) -> None:
        await ctx.report_progress(
            progress=round(elapsed, 1),
            total=wait,
            message=f"waiting for a reviewer in {group}, {_elapsed(elapsed)} so far",
        )

    return report
