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
"""

from __future__ import annotations

import json
import logging
from typing import Any

import jsonschema
from django.conf import settings
from mcp.server.auth.provider import TokenVerifier
from mcp.server.auth.settings import AuthSettings
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR, CallToolResult, TextContent, Tool
from pydantic import ValidationError

from approvals import dbexec, grants, site
from approvals import services as approvals
from approvals.errors import ImpriError, InvalidInput
from approvals.mcp.server import (
    AGENT_SCOPE,
    ImpriMCPServer,
    _base_url,
    _progress_reporter,
    _wait_seconds,
    _wants_progress,
    current_agent,
    error_result,
    in_own_task,
    invalid,
)
from approvals.models import Action, ActionStatus
from approvals.presenters import inbox_url

from . import services, upstream
from .models import Policy
from .upstream import Target, UpstreamError

logger = logging.getLogger(__name__)

META_KEY = "impri/action"
REVIEW_NOTE = (
    "\n\n[Impri gateway] A human approves each call of this tool before it runs. If the result "
    "says it is awaiting approval, nothing was executed: call it again with exactly the same "
    "arguments to wait for the decision. A reviewer may lower or change values; the result "
    "describes what was actually executed."
)


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


def _visible(name: str, tool_names: list[str]):
    gateway = services.load(name)
    explicit = services.policies(gateway)
    return {tool: services.effective(gateway, tool, explicit) for tool in tool_names}


class GatewayServer(ImpriMCPServer):
    def __init__(self, gateway: str, **kwargs: Any):
        super().__init__(**kwargs)
        self.gateway = gateway

    def _tool_input_schema(self, name: str):
        return None  # the upstream validates its own arguments

    async def fetch_tools(self) -> tuple[list[Tool], str]:
        """The upstream's tools, live; the last list it gave when it cannot be reached."""
        gateway = await dbexec.run(services.load, self.gateway)
        try:
            tools = await upstream.list_tools(Target.of(gateway))
        except UpstreamError as exc:
            await dbexec.run(services.record_state, self.gateway, str(exc))
            cached = [Tool.model_validate(t) for t in gateway.tools_cache]
            return cached, str(exc)
        dumped = [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in tools]
        await dbexec.run(services.record_state, self.gateway, "", dumped)
        return tools, ""

    async def list_tools(self) -> list[Tool]:
        tools, error = await self.fetch_tools()
        if error and not tools:
            raise MCPError(code=INTERNAL_ERROR, message=error)
        verdicts = await dbexec.run(_visible, self.gateway, [t.name for t in tools])
        listed = []
        for tool in tools:
            verdict = verdicts[tool.name]
            if verdict == Policy.DENY:
                continue
            if verdict == Policy.REVIEW:
                tool = tool.model_copy(
                    update={"description": (tool.description or "") + REVIEW_NOTE}
                )
            listed.append(tool)
        return listed

    async def call_tool(self, name: str, arguments: dict[str, Any], context=None):
        try:
            agent = await current_agent(context)
            gateway, policy, verdict = await dbexec.run(_snapshot, self.gateway, name)
            if verdict == Policy.DENY:
                return _error(
                    f"Denied: {name} is not available through the Impri gateway {self.gateway!r} "
                    f"(policy: deny). It was not called; do not retry it."
                )
            target = Target.of(gateway)
            if verdict == Policy.ALLOW:
                return await self._pass(agent, target, name, arguments, redact=policy.redact)
            return await self._gated(context, agent, gateway, target, name, arguments)
        except ImpriError as exc:
            return error_result(exc)

    async def _pass(self, agent, target: Target, name: str, arguments: dict, *, redact: bool):
        try:
            result = await upstream.call_tool(target, name, arguments)
        except UpstreamError as exc:
            await dbexec.run(services.record_state, self.gateway, str(exc))
            await dbexec.run(
                services.record_pass,
                agent,
                self.gateway,
                name,
                arguments,
                redact=redact,
                error=str(exc),
            )
            return _error(f"Upstream unavailable: {exc}. Impri did not retry the call.")
        await dbexec.run(services.record_state, self.gateway)
        await dbexec.run(services.record_pass, agent, self.gateway, name, arguments, redact=redact)
        return result

    async def _schema(self, gateway, name: str) -> dict | None:
        """The upstream's input schema for ``name`` (asking it when the cached list lacks it)."""
        known = {t.get("name"): t for t in gateway.tools_cache}
        if name not in known:
            tools, error = await self.fetch_tools()
            known = {t.name: t.model_dump(mode="json", by_alias=True) for t in tools}
            if name not in known:
                if error:
                    raise UpstreamUnavailable(error)
                raise InvalidInput("name", f"{self.gateway} has no tool named {name!r}")
        return known[name].get("inputSchema")

    async def _gated(self, ctx, agent, gateway, target: Target, name: str, arguments: dict):
        # A call the upstream would refuse never reaches a reviewer.
        schema = await self._schema(gateway, name)
        if schema:
            check_arguments(schema, arguments)
        try:
            action = await dbexec.run(services.begin, agent, gateway, name, arguments)
        except ValidationError as exc:
            raise invalid(exc) from None
        link = inbox_url(action, _base_url(ctx))
        if not action.is_settled:
            progress = _wants_progress(ctx)
            wait = _wait_seconds(None, progress=progress)
            action = await in_own_task(
                approvals.await_decision(
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
            return await self._execute(agent, target, name, action, meta)
        await dbexec.run(services.delivered, action.pk)
        if status in (ActionStatus.EXECUTED, ActionStatus.FAILED):
            return _error(
                f"Already handled: the approved call for action {action.pk} was made before and "
                f"reported {status}; Impri does not call the upstream twice. See {link}.",
                meta,
            )
        return _error(_refusal(name, action), meta)

    async def _execute(self, agent, target: Target, name: str, action: Action, meta: dict):
        claims = grants.claims_for(action)
        grant = grants.sign(claims)
        if not await dbexec.run(services.claim, action, claims["jti"]):
            await dbexec.run(services.delivered, action.pk)
            return _error(
                f"Already called: the upstream call for action {action.pk} was already made by "
                f"another request; Impri never repeats it. Its result will be in {meta['inbox_url']}.",
                meta,
            )
        report = dbexec.wrap(approvals.report_result)
        try:
            result = await upstream.call_tool(target, name, action.payload)
        except UpstreamError as exc:
            await dbexec.run(services.record_state, self.gateway, str(exc))
            await report(
                action.pk,
                agent=agent,
                status=ActionStatus.FAILED,
                detail={"error": str(exc), "upstream": target.name},
                grant=grant,
            )
            await dbexec.run(services.delivered, action.pk)
            meta["status"] = ActionStatus.FAILED.value
            return _error(
                f"Approved, but the upstream call failed: {exc}. Action {action.pk} is reported "
                "failed. Impri did not retry it: check with the user before trying again.",
                meta,
            )
        status = ActionStatus.FAILED if result.is_error else ActionStatus.EXECUTED
        await dbexec.run(services.record_state, self.gateway)
        await report(action.pk, agent=agent, status=status, detail=_summary(result), grant=grant)
        await dbexec.run(services.delivered, action.pk)
        meta.update(
            status=status.value,
            edited_by_human=action.edited_by_human,
            executed_arguments=action.payload,
        )
        return result.model_copy(update={"meta": {**(result.meta or {}), META_KEY: meta}})


class UpstreamUnavailable(ImpriError):
    status_code = 503
    code = "unavailable"


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
    auth = None
    if verifier is not None:
        auth = AuthSettings(
            issuer_url=site.base_url(),
            resource_server_url=None,
            required_scopes=[AGENT_SCOPE],
        )
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
        auth=auth,
    )
