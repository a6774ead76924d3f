"""The gateway's MCP server: an upstream's tools, with Impri's policies in between.

One ``GatewayServer`` per gateway name serves ``/mcp/gateway/<name>`` (streamable
HTTP, the agent is the bearer key) and ``impri mcp --gateway <name>`` (stdio,
the agent is ``IMPRI_API_KEY``). The policy is read from the database on each
request, so a change in admin or ``impri gateway import`` applies at once.

- ``deny``: hidden from the list, and a call is refused naming the policy.
- ``allow``: passed through unchanged, audited with a hash of the arguments.
- ``review`` (or a rule naming the kind ``mcp.<gateway>.<tool>``): the call
  becomes an action and waits like ``impri_await_decision``. On approval the
  upstream is called exactly once with the approved payload, and the result is
  reported bound to the approval's grant. Nothing else reaches the upstream.

Agents see the pinned definitions (``gateway/pins.py``), never the upstream's
current ones; a tool whose definition changed upstream is held and refused
until an operator accepts the change. Every forwarded call lists the upstream's
tools first on the same connection and goes ahead only if the tool is still
the one pinned (for a gated call: the one the reviewer approved).
"""

from __future__ import annotations

import json
import logging
from typing import Any

import jsonschema
from django.conf import settings
from mcp.server.auth.provider import TokenVerifier
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR, CallToolResult, TextContent, Tool
from pydantic import ValidationError

from agent_doors.mcp.server import (
    ImpriMCPServer,
    _base_url,
    _progress_reporter,
    _wait_seconds,
    _wants_progress,
    agent_auth,
    current_agent,
    error_result,
    in_own_task,
    invalid,
)
from approvals import grants
from approvals import services as approvals
from approvals.errors import ImpriError, InvalidInput
from approvals.models import Action, ActionStatus
from approvals.presenters import inbox_url
from plumbing.database import database_sync_to_async
from waiting import decisions

from . import pins, services, upstream
from .models import Policy
from .upstream import Refusal, Target, UpstreamError, UpstreamRefused

logger = logging.getLogger(__name__)

META_KEY = "impri/action"
REVIEW_NOTE = (
    "\n\n[Impri gateway] A human approves each call of this tool before it runs. If the result "
    "says it is awaiting approval, nothing was executed: call it again with exactly the same "
    "arguments to wait for the decision. A reviewer may lower or change values; the result "
    "describes what was actually executed."
)


HELD_NOTE = (
    "\n\n[Impri gateway] This tool changed upstream: calls are refused until an operator "
    "reviews the change."
)


class Held(Refusal):
    """The tool is offered with a definition nobody accepted yet."""


class ToolChanged(Refusal):
    """The upstream no longer offers the definition a gated call was approved against."""

    def __init__(self, approved: str, now: str | None):
        super().__init__(
            f"approved against {approved[:12] or 'no pin'}, upstream now {now and now[:12]}"
        )
        self.approved, self.now = approved, now


def _held_error(gateway: str, name: str) -> CallToolResult:
    return error_result(HeldTool(gateway, name))


def _forwarder(ctx):
    """The upstream's progress notifications, passed on to the agent's progress token."""
    if ctx is None or not _wants_progress(ctx):
        return None

    async def forward(progress: float, total: float | None, message: str | None) -> None:
        await ctx.report_progress(progress=progress, total=total, message=message)

    return forward


def _error(text: str, meta: dict | None = None) -> CallToolResult:
    return CallToolResult(
        content=[TextContent(type="text", text=text)],
        is_error=True,
        _meta={META_KEY: meta} if meta else None,
    )


def _action_meta(action: Action, link: str, status: str | None = None) -> dict:
    return {
        "action_id": action.pk,
        "status": status or action.effective_status,
        "inbox_url": link,
    }


def _summary(result: CallToolResult) -> dict:
    """What goes into the report: the upstream's text (and structured result), bounded."""
    text = "\n".join(c.text for c in result.content if isinstance(c, TextContent))
    summary: dict[str, Any] = {"is_error": result.is_error, "text": text[:2000]}
    if result.structured_content is not None:
        encoded = json.dumps(result.structured_content, default=str)
        if len(encoded) <= 4000:
            summary["structured"] = result.structured_content
    return summary


def _snapshot(name: str, tool: str):
    """The gateway, the tool's policy and what it amounts to, read in one go."""
    gateway = services.load(name)
    policy = services.policy_for(gateway, tool)
    return gateway, policy, services.effective(gateway, tool)


class GatewayServer(ImpriMCPServer):
    def __init__(self, gateway: str, **kwargs: Any):
        super().__init__(**kwargs)
        self.gateway = gateway

    async def survey(self) -> tuple[list[pins.ToolState], str]:
        """Ask the upstream and compare with the pins (holding any change); the pins alone
        when it cannot be reached, with the error."""
        gateway = await database_sync_to_async(services.load)(self.gateway)
        try:
            tools = await upstream.list_tools(Target.of(gateway))
        except (UpstreamError, UpstreamRefused) as exc:
            transport = isinstance(exc, UpstreamError)
            await database_sync_to_async(services.record_state)(
                self.gateway, str(exc) if transport else ""
            )
            error = str(exc) if transport else f"upstream {self.gateway!r} refused to list: {exc}"
            return await database_sync_to_async(pins.observe)(self.gateway, None), error
        dumped = upstream.dump_tools(tools)
        await database_sync_to_async(services.record_state)(self.gateway, "", dumped)
        return await database_sync_to_async(pins.observe)(self.gateway, dumped), ""

    async def list_tools(self) -> list[Tool]:
        states, error = await self.survey()
        listed = []
        for state in states:
            if state.listed is None:
                continue
            tool = Tool.model_validate(state.listed)
            note = (REVIEW_NOTE if state.verdict == Policy.REVIEW else "") + (
                HELD_NOTE if state.pin.held else ""
            )
            if note:
                tool = tool.model_copy(update={"description": (tool.description or "") + note})
            listed.append(tool)
        if error and not listed:
            raise MCPError(code=INTERNAL_ERROR, message=error)
        return listed

    async def call_tool(self, name: str, arguments: dict[str, Any], context=None):
        try:
            agent = await current_agent(context)
            gateway, policy, verdict = await database_sync_to_async(_snapshot)(self.gateway, name)
            if verdict == Policy.DENY:
                return _error(
                    f"Denied: {name} is not available through the Impri gateway {self.gateway!r} "
                    f"(policy: deny). It was not called; do not retry it."
                )
            if gateway.pinned_at is None:
                last = f" (last contact: {gateway.last_error})" if gateway.last_error else ""
                return _error(
                    f"Not available yet: the Impri gateway {self.gateway!r} has not recorded its "
                    f"upstream's tools{last}. An operator must run `impri gateway refresh "
                    f"{self.gateway}`. {name} was not called."
                )
            target = Target.of(gateway)
            if verdict == Policy.ALLOW:
                pin = await database_sync_to_async(pins.pin_for)(self.gateway, name)
                if pin is not None and pin.held:
                    return _held_error(self.gateway, name)
                return await self._pass(
                    context, agent, target, name, arguments, redact=policy.redact
                )
            return await self._gated(context, agent, gateway, target, name, arguments)
        except ImpriError as exc:
            return error_result(exc)

    async def _pass(self, ctx, agent, target: Target, name: str, arguments: dict, *, redact: bool):
        async def check(tools: list[Tool]) -> None:
            states = await database_sync_to_async(pins.observe)(
                self.gateway, upstream.dump_tools(tools)
            )
            if any(s.name == name and s.state in ("changed", "new") for s in states):
                raise Held(name)
            # Not offered at all: forwarded, and the upstream answers for itself.

        audit_pass = database_sync_to_async(services.record_pass)
        try:
            result = await upstream.call_tool(
                target, name, arguments, check=check, progress=_forwarder(ctx)
            )
        except Held:
            return _held_error(self.gateway, name)
        except (UpstreamError, UpstreamRefused) as exc:
            transport = isinstance(exc, UpstreamError)
            await database_sync_to_async(services.record_state)(
                self.gateway, str(exc) if transport else ""
            )
            await audit_pass(agent, self.gateway, name, arguments, redact=redact, error=str(exc))
            if transport:
                return _error(f"Upstream unavailable: {exc}. Impri did not retry the call.")
            return _error(f"The upstream refused the call to {name}: {exc}")
        await database_sync_to_async(services.record_state)(self.gateway)
        await audit_pass(agent, self.gateway, name, arguments, redact=redact)
        return result

    async def _pinned(self, name: str) -> pins.PinnedTool:
        """The tool's pin, after asking the upstream (the pins alone when it is away)."""
        states, error = await self.survey()
        state = next((s for s in states if s.name == name), None)
        if state is not None and state.state in ("changed", "new"):
            raise HeldTool(self.gateway, name)
        if state is None or state.pin is None or not state.pin.sha256:
            if error:
                raise UpstreamUnavailable(error)
            raise InvalidInput("name", f"{self.gateway} has no tool named {name!r}")
        if state.state == "not offered":
            raise InvalidInput("name", f"{self.gateway} no longer offers a tool named {name!r}")
        return state.pin

    async def _gated(self, ctx, agent, gateway, target: Target, name: str, arguments: dict):
        try:
            pin = await self._pinned(name)
        except HeldTool:
            # An identical call approved before the change is carried out now, and
            # fails (tool_changed) without reaching the upstream: it ends, and says so.
            action = await database_sync_to_async(services.approved_for)(
                agent, gateway, name, arguments
            )
            if action is None:
                raise
            meta = _action_meta(action, inbox_url(action, _base_url(ctx)))
            return await self._execute(ctx, agent, target, name, arguments, action, meta)
        # A call the upstream would refuse never reaches a reviewer.
        schema = (pin.definition or {}).get("inputSchema")
        if schema:
            check_arguments(schema, arguments)
        try:
            action = await database_sync_to_async(services.begin)(
                agent, gateway, name, arguments, definition_sha256=pin.sha256
            )
        except ValidationError as exc:
            raise invalid(exc) from None
        link = inbox_url(action, _base_url(ctx))
        if not action.is_settled:
            progress = _wants_progress(ctx)
            wait = _wait_seconds(None, progress=progress)
            action = await in_own_task(
                decisions.wait_for_decision(
                    action.pk,
                    agent=agent,
                    timeout_s=wait,
                    on_progress=_progress_reporter(ctx, action, wait) if progress else None,
                    progress_every_s=settings.IMPRI_MCP_PROGRESS_EVERY_S,
                )
            )
        status = action.effective_status
        meta = _action_meta(action, link, status)
        if status == ActionStatus.PENDING:
            return _error(
                _before(action)
                + f"Awaiting approval: nothing was executed yet. Impri sent this call of {name} to "
                f"a human reviewer as action {action.pk} ({link}). Call {name} again with exactly "
                "the same arguments to keep waiting for the decision; do not tell the user it "
                "is done.",
                meta,
            )
        if status == ActionStatus.APPROVED:
            return await self._execute(ctx, agent, target, name, arguments, action, meta)
        await database_sync_to_async(services.delivered)(action.pk)
        if status in (ActionStatus.EXECUTED, ActionStatus.FAILED):
            return _error(
                f"Already handled: the approved call for action {action.pk} was made before and "
                f"reported {status}; Impri does not call the upstream twice. See {link}.",
                meta,
            )
        return _error(_refusal(name, action), meta)

    async def _execute(
        self, ctx, agent, target: Target, name: str, arguments: dict, action: Action, meta: dict
    ):
        claims = grants.claims_for(action)
        grant = grants.sign(claims)
        approved = await database_sync_to_async(services.definition_of)(action.pk)
        problem = await database_sync_to_async(services.payload_problem)(
            action.pk,
            agent,
            self.gateway,
            name,
            arguments,
            action.payload,
        )
        if not await database_sync_to_async(services.claim)(action):
            await database_sync_to_async(services.delivered)(action.pk)
            return _error(
                f"Already called: the upstream call for action {action.pk} was already made by "
                f"another request; Impri never repeats it. Its result will be in {meta['inbox_url']}.",
                meta,
            )
        report = database_sync_to_async(approvals.report_result)

        async def check(tools: list[Tool]) -> None:
            """Just before the call, on its connection: still the definition that was approved?"""
            dumped = upstream.dump_tools(tools)
            await database_sync_to_async(pins.observe)(self.gateway, dumped)
            offered = next((t for t in dumped if t.get("name") == name), None)
            now = pins.sha256_of(offered) if offered is not None else None
            if not approved or now != approved:
                raise ToolChanged(approved, now)
            await database_sync_to_async(services.called)(action, claims["jti"], approved)

        async def failed(detail: dict, text: str) -> CallToolResult:
            await report(
                action.pk, agent=agent, status=ActionStatus.FAILED, detail=detail, grant=grant
            )
            await database_sync_to_async(services.delivered)(action.pk)
            meta["status"] = ActionStatus.FAILED.value
            return _error(text, meta)

        if problem:
            # Not what a reviewer approved for this call: never sent upstream.
            await database_sync_to_async(services.refuse_mismatch)(action, self.gateway, problem)
            return await failed(
                {"reason": "payload_mismatch", "problem": problem, "upstream": target.name},
                f"Approved, but not executed: the approved payload of action {action.pk} is not "
                f"this call of {name} with a reviewer's edits ({problem}), so Impri did not call "
                "the upstream. The action is reported failed (payload_mismatch).",
            )
        try:
            result = await upstream.call_tool(
                target, name, action.payload, check=check, progress=_forwarder(ctx)
            )
        except ToolChanged as exc:
            return await failed(
                {
                    "reason": "tool_changed",
                    "approved_sha256": exc.approved or None,
                    "upstream_sha256": exc.now,
                    "upstream": target.name,
                },
                f"Approved, but not executed: {name} changed upstream after this call was "
                f"approved (its definition is no longer the one the reviewer approved), so "
                f"Impri did not call it. Action {action.pk} is reported failed (tool_changed). "
                "An operator must review the change before the tool can be used again.",
            )
        except UpstreamRefused as exc:
            await database_sync_to_async(services.record_state)(self.gateway)
            return await failed(
                {"reason": "upstream_error", "error": str(exc), "upstream": target.name},
                f"Approved, but the upstream refused the call: {exc}. Action {action.pk} is "
                "reported failed.",
            )
        except UpstreamError as exc:
            await database_sync_to_async(services.record_state)(self.gateway, str(exc))
            return await failed(
                {"error": str(exc), "upstream": target.name},
                f"Approved, but the upstream call failed: {exc}. Action {action.pk} is reported "
                "failed. Impri did not retry it: check with the user before trying again.",
            )
        status = ActionStatus.FAILED if result.is_error else ActionStatus.EXECUTED
        await database_sync_to_async(services.record_state)(self.gateway)
        await report(action.pk, agent=agent, status=status, detail=_summary(result), grant=grant)
        await database_sync_to_async(services.delivered)(action.pk)
        meta.update(
            status=status.value,
            edited_by_human=action.edited_by_human,
            executed_arguments=action.payload,
        )
        return result.model_copy(update={"meta": {**(result.meta or {}), META_KEY: meta}})


class UpstreamUnavailable(ImpriError):
    status_code = 503
    code = "unavailable"


class HeldTool(ImpriError):
    status_code = 409
    code = "tool_changed"

    def __init__(self, gateway: str, name: str):
        super().__init__(
            f"{name} changed upstream (its definition differs from the one an operator accepted "
            f"for the Impri gateway {gateway!r}), so Impri does not call it. An operator must "
            f"review the change (`impri gateway accept {gateway} {name}`, or in admin) before it "
            "can be used. It was not called.",
            field="name",
        )


def check_arguments(schema: dict, arguments: dict) -> None:
    """Refuse arguments that do not fit the upstream's input schema, naming the field."""
    validator = jsonschema.validators.validator_for(schema)(schema)
    errors = sorted(validator.iter_errors(arguments), key=lambda e: list(e.absolute_path))
    if errors:
        first = errors[0]
        field = ".".join(["arguments", *(str(p) for p in first.absolute_path)])
        raise InvalidInput(field, first.message)


def _before(action: Action) -> str:
    """What became of the settled identical call this one repeats, if any."""
    previous = (action.context or {}).get("repeat_of")
    if not isinstance(previous, dict):
        return ""
    status = previous.get("status")
    if status == ActionStatus.REJECTED:
        note = f": {previous['note']}" if previous.get("note") else ""
        reason = f" (reason: {previous['reject_reason']})" if previous.get("reject_reason") else ""
        return (
            f"Your previous identical call (action {previous['action_id']}) was rejected"
            f"{note}{reason}; this repeat is a new request. "
        )
    return f"Your previous identical call (action {previous['action_id']}) is {status}. "


def _refusal(name: str, action: Action) -> str:
    status = action.effective_status
    if status == ActionStatus.REJECTED:
        who = (action.decided_by or {}).get("name", "a reviewer")
        reason = f" (reason: {action.reject_reason})" if action.reject_reason else ""
        note = f": {action.note}" if action.note else ""
        return (
            f"Rejected: {name} was not executed. {who} rejected action {action.pk}{note}{reason}. "
            "Do not retry the same call."
        )
    if status == ActionStatus.CHANGES_REQUESTED:
        who = (action.decided_by or {}).get("name", "a reviewer")
        return (
            f"Changes requested: {name} was not executed. {who} asked for changes on action "
            f"{action.pk}: {action.note}. Change the call accordingly before trying again."
        )
    if status == ActionStatus.EXPIRED:
        return f"Expired: nobody approved action {action.pk} in time; {name} was not executed."
    return f"Cancelled: action {action.pk} was withdrawn; {name} was not executed."


def build_gateway_server(
    gateway: str, *, api_key: str | None = None, verifier: TokenVerifier | None = None
) -> GatewayServer:
    return GatewayServer(
        gateway,
        api_key=api_key,
        name=f"impri-gateway-{gateway}",
        title=f"{gateway} (through Impri)",
        description=f"The tools of {gateway}, with Impri's human approval in front of them.",
        instructions=(
            f"These are the tools of {gateway}, behind Impri. Some calls wait for a human "
            "reviewer: a result that says 'Awaiting approval' means nothing was executed yet; "
            "call the same tool again with the same arguments. A reviewer may change values; "
            "the result describes what was actually executed."
        ),
        token_verifier=verifier,
        auth=agent_auth(verifier),
    )
