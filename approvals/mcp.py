"""MCP adapter: the agent side of the service layer as MCP tools.

Like ``approvals/api.py``, every tool parses its arguments, calls a service
through ``dbexec`` (the bounded database pool) and shapes the answer with the presenters.
The same server object serves streamable HTTP (``impri/mcp_asgi.py``, the agent
comes from the bearer key checked by the SDK's token verifier), stdio
(``impri mcp``, the agent comes from ``IMPRI_API_KEY``) and in-process tests.

Errors are tool results with ``isError: true``: a domain error keeps the
message REST sends in ``detail`` and carries its REST status in ``_meta``;
invalid arguments name the field. Anything unexpected is logged with its
traceback by the SDK, and the caller sees only the tool's name.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from typing import Annotated, Any, Literal

from django.conf import settings
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken, TokenVerifier
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, Field, ValidationError

from . import dbexec, keys, services, site
from .errors import Forbidden, ImpriError, InvalidInput, NotAuthenticated
from .models import Action
from .presenters import action_out, decision_out
from .schemas import ActionIn, ActionOut, DecisionOut, EditableIn, PreviewIn, ResultIn

logger = logging.getLogger(__name__)

AGENT_SCOPE = "impri:agent"
ERROR_META_KEY = "impri/error"

INSTRUCTIONS = """\
Impri puts a human reviewer between you and actions that matter: refunds, charges, emails, deploys.
1. Propose the action with impri_push_action and keep the action_id it returns.
2. Call impri_await_decision with that action_id. While its status is "pending", nobody has \
decided yet: call impri_await_decision again (tell the user you are waiting if it takes long).
3. Only when the status is "approved", execute the action with exactly the payload that \
impri_await_decision returned: a reviewer may have edited it (edited_by_human is then true \
and preview shows the diff). Never execute the payload you proposed instead. "rejected", \
"changes_requested", "expired" and "cancelled" are final: do not execute; the note says why. \
After "changes_requested", push a corrected action naming the old one in supersedes.
4. After executing, report what happened with impri_report_result (executed or failed).
"""


# --- Output models that only MCP has (DESIGN §4) ---------------------------------


# --- Identity ----------------------------------------------------------------------


class AgentAccessToken(AccessToken):
    """The SDK's access token carrying the caller ``keys.authenticate`` found.

    ``impri.mcp_asgi``'s token verifier issues it; the tools read it back with
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
        principal = await dbexec.run(keys.authenticate, server.api_key)
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
        return site.base_url() + "/"
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


_read = dbexec.wrap(services.get_action_for_agent)


# --- Tools ---------------------------------------------------------------------------


async def impri_push_action(
    kind: Annotated[
        str, Field(description="Dotted lowercase kind of action, e.g. payment.refund.")
    ],
    title: Annotated[
        str,
        Field(
            description="One line the reviewer sees in the queue, e.g. Refund $84.00 on order 10432."
        ),
    ],
    preview: Annotated[
        PreviewIn,
        Field(
            description="What the reviewer reads to decide: {format: plain|markdown|diff|json, body}."
        ),
    ],
    payload: Annotated[
        dict[str, Any],
        Field(
            description="The exact JSON object you will execute once approved "
            '(e.g. {"order_id": "10432", "amount_cents": 8400}).'
        ),
    ],
    ctx: Context,
    target_url: Annotated[
        str | None,
        Field(description="http(s) link to the object acted on, e.g. the order in the shop admin."),
    ] = None,
    editable: Annotated[
        list[str | EditableIn] | None,
        Field(
            description="Dotted paths under payload. a reviewer may change before approving, "
            "e.g. [payload.amount_cents]. An entry may be {path, min, max} to narrow what a "
            "reviewer may approve (a money field ending in _cents already defaults to "
            "0 < value <= what you asked; you can narrow, never widen)."
        ),
    ] = None,
    flags: Annotated[
        list[str] | None,
        Field(description="Short lowercase markers for the rules, e.g. [policy_exception]."),
    ] = None,
    context: Annotated[
        dict[str, Any] | None,
        Field(
            description="Labelled facts the reviewer needs beside the payload: the customer's "
            "message, an order summary."
        ),
    ] = None,
    idempotency_key: Annotated[
        str | None,
        Field(
            description="Your own id for this proposal. Repeating a push with the same key returns "
            "the same action instead of a duplicate; use it when retrying."
        ),
    ] = None,
    expires_in_s: Annotated[
        int | None,
        Field(description="Seconds until the action expires undecided (server default: 1 day)."),
    ] = None,
    callback_url: Annotated[
        str | None,
        Field(
            description="Optional http(s) URL Impri POSTs the decision to (signed, Standard "
            "Webhooks) when the action settles; it must reach a public address."
        ),
    ] = None,
    supersedes: Annotated[
        str | None,
        Field(
            description="The action_id of an earlier action of yours this one replaces, e.g. "
            "after a reviewer answered changes_requested."
        ),
    ] = None,
) -> ActionOut:
    """Propose an action for a human to review before you carry it out.

    Nothing is executed by Impri, and you must not execute it yet either. Returns
    the action_id; next call impri_await_decision with it and act only on the
    decision that returns.
    """
    agent = await current_agent(ctx)
    fields = {
        "kind": kind,
        "title": title,
        "preview": preview.model_dump(),
        "payload": payload,
        "target_url": target_url,
        "editable": [
            entry.model_dump(exclude_none=True) if isinstance(entry, EditableIn) else entry
            for entry in editable
        ]
        if editable is not None
        else None,
        "flags": flags,
        "context": context,
        "idempotency_key": idempotency_key,
        "expires_in_s": expires_in_s,
        "callback_url": callback_url,
        "supersedes": supersedes,
    }
    data = _parse(ActionIn, {k: v for k, v in fields.items() if v is not None})
    action, _ = await dbexec.run(services.push_action, agent, data)
    return ActionOut.model_validate(action_out(action, _base_url(ctx)))


async def impri_await_decision(
    action_id: Annotated[str, Field(description="The action_id impri_push_action returned.")],
    ctx: Context,
    timeout_s: Annotated[
        float | None,
        Field(
            ge=0,
            description="At most this many seconds to wait (0: just look). Without it the server "
            "waits as long as it safely can.",
        ),
    ] = None,
) -> DecisionOut:
    """Wait for the human decision on an action you pushed, and return it.

    Returns the moment a reviewer decides. If nobody has decided when the wait
    ends, status is "pending": that is not an error, call impri_await_decision
    again with the same action_id.
    When status is "approved", execute exactly the payload returned here, never
    the one you proposed: a reviewer may have edited it (edited_by_human is then
    true and preview shows the change as a diff). Money moves, messages go out
    and deploys happen only with this payload. "rejected", "changes_requested",
    "expired" and "cancelled" are final: do not execute; note says why (after
    "changes_requested", push a corrected action with supersedes set to this
    action_id). After executing, call impri_report_result.
    """
    agent = await current_agent(ctx)
    progress = _wants_progress(ctx)
    wait = _wait_seconds(timeout_s, progress=progress)
    action = await _read(action_id, agent)  # 404 and 403 before any waiting
    on_progress = _progress_reporter(ctx, action, wait) if progress else None
    action = await in_own_task(
        services.await_decision(
            action_id,
            agent=agent,
            timeout_s=wait,
            on_progress=on_progress,
            progress_every_s=settings.IMPRI_MCP_PROGRESS_EVERY_S,
        )
    )
    return DecisionOut.model_validate(decision_out(action))


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


async def impri_report_result(
    action_id: Annotated[str, Field(description="The action you executed.")],
    status: Annotated[
        Literal["executed", "failed"],
        Field(description="executed when it went through, failed when it did not."),
    ],
    ctx: Context,
    detail: Annotated[
        dict[str, Any] | str | None,
        Field(description="What the executor said, e.g. the processor's transaction id or error."),
    ] = None,
    grant: Annotated[
        str | None,
        Field(description="The grant impri_await_decision returned with the approval."),
    ] = None,
) -> ActionOut:
    """Report what happened when you executed an approved action.

    Only an approved action takes a report. Repeating the same report is
    harmless; a different second report is refused.
    """
    agent = await current_agent(ctx)
    data = _parse(ResultIn, {"status": status, "detail": detail, "grant": grant})
    action = await dbexec.run(
        services.report_result,
        action_id,
        agent=agent,
        status=data.status,
        detail=data.detail,
        grant=data.grant,
    )
    return ActionOut.model_validate(action_out(action, _base_url(ctx)))


async def impri_get_action(
    action_id: Annotated[str, Field(description="An action you pushed.")],
    ctx: Context,
) -> ActionOut:
    """Read one of your actions as it is now, without waiting: status, payload as
    pushed and as approved, decision and reported result."""
    agent = await current_agent(ctx)
    action = await _read(action_id, agent)
    return ActionOut.model_validate(action_out(action, _base_url(ctx)))


async def impri_cancel_action(
    action_id: Annotated[str, Field(description="A pending action you pushed.")],
    ctx: Context,
    reason: Annotated[
        str, Field(max_length=5000, description="Why you withdraw it; the reviewer sees this.")
    ] = "",
) -> ActionOut:
    """Withdraw a pending action you no longer want, e.g. the customer changed their
    mind. Only a pending action can be cancelled; a decided one cannot."""
    agent = await current_agent(ctx)
    action = await dbexec.run(services.cancel_action, action_id, agent=agent, reason=reason)
    return ActionOut.model_validate(action_out(action, _base_url(ctx)))


# --- The server ------------------------------------------------------------------------


def build_server(*, api_key: str | None = None, verifier: TokenVerifier | None = None):
    """The MCP server with Impri's tools.

    ``api_key``: stdio and in-process use; the agent is that key's. ``verifier``:
    streamable HTTP; the agent is the request's bearer key.
    """
    auth = None
    if verifier is not None:
        auth = AuthSettings(
            issuer_url=site.base_url(),
            resource_server_url=None,
            required_scopes=[AGENT_SCOPE],
        )
    server = ImpriMCPServer(
        api_key=api_key,
        name="impri",
        title="Impri",
        description="Human approval for the actions of AI agents.",
        instructions=INSTRUCTIONS,
        token_verifier=verifier,
        auth=auth,
    )
    server.register(
        impri_push_action,
        title="Propose an action for human review",
        annotations=ToolAnnotations(
            read_only_hint=False, destructive_hint=False, open_world_hint=False
        ),
    )
    server.register(
        impri_await_decision,
        title="Wait for the human decision",
        annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False),
    )
    server.register(
        impri_report_result,
        title="Report the outcome of an approved action",
        annotations=ToolAnnotations(
            read_only_hint=False,
            destructive_hint=False,
            idempotent_hint=True,
            open_world_hint=False,
        ),
    )
    server.register(
        impri_get_action,
        title="Read an action",
        annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False),
    )
    server.register(
        impri_cancel_action,
        title="Withdraw a pending action",
        annotations=ToolAnnotations(
            read_only_hint=False, destructive_hint=True, open_world_hint=False
        ),
    )
    return server
