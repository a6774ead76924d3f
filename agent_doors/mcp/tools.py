"""Impri's MCP tools: the agent side of the service layer, and the server that offers them.

Like the REST routes (``agent_doors.api``), every tool parses its arguments, calls a service
through ``dbexec`` (the bounded database pool) and shapes the answer with the presenters.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from django.conf import settings
from mcp.server.auth.provider import TokenVerifier
from mcp.server.mcpserver import Context
from mcp_types import ToolAnnotations
from pydantic import Field

from approvals import services
from approvals.presenters import action_out
from approvals.schemas import ActionIn, ActionOut, DecisionOut, EditableIn, PreviewIn, ResultIn
from plumbing.database import database_sync_to_async
from waiting import decisions

from .server import (
    ImpriMCPServer,
    _base_url,
    _parse,
    _progress_reporter,
    _wait_seconds,
    _wants_progress,
    agent_auth,
    current_agent,
    in_own_task,
)

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


_read = database_sync_to_async(services.get_action_for_agent)


# --- Tools ---------------------------------------------------------------------------


async def impri_push_action(  # noqa: PLR0913  (the SDK builds the tool's schema from these)
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
            "reviewer may approve (an amount of the action, e.g. payment.refund's "
            "amount_cents, already defaults to 0 < value <= what you asked; you can narrow, "
            "never widen)."
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
        Field(
            description="Seconds until the action expires undecided (server default: 1 day).",
            strict=True,  # a number: `true` and "60" are refused, as over REST
        ),
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
    action, _ = await database_sync_to_async(services.push_action)(agent, data)
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
        decisions.wait_for_decision(  # the REST long-poll's wait, on the same hub
            action_id,
            agent=agent,
            timeout_s=wait,
            on_progress=on_progress,
            progress_every_s=settings.IMPRI_MCP_PROGRESS_EVERY_S,
        )
    )
    # The grant is the one stored with the decision (approvals.grant_store).
    return DecisionOut.model_validate(await decisions.decision_answer(action))


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
    reference: Annotated[
        str | None,
        Field(
            description="The processor's id for what you executed (a Stripe refund re_...): "
            "reconciliation matches the money that moved to this action by it."
        ),
    ] = None,
) -> ActionOut:
    """Report what happened when you executed an approved action.

    Only an approved action takes a report. Repeating the same report is
    harmless; a different second report is refused.
    """
    agent = await current_agent(ctx)
    data = _parse(
        ResultIn, {"status": status, "detail": detail, "grant": grant, "reference": reference}
    )
    action = await database_sync_to_async(services.report_result)(
        action_id,
        agent=agent,
        status=data.status,
        detail=data.detail,
        grant=data.grant,
        reference=data.reference,
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
    return ActionOut.model_validate(
        await database_sync_to_async(action_out)(action, _base_url(ctx), reconciliation=True)
    )


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
    action = await database_sync_to_async(services.cancel_action)(
        action_id, agent=agent, reason=reason
    )
    return ActionOut.model_validate(action_out(action, _base_url(ctx)))


# --- The server ------------------------------------------------------------------------


def build_server(*, api_key: str | None = None, verifier: TokenVerifier | None = None):
    """The MCP server with Impri's tools.

    ``api_key``: stdio and in-process use; the agent is that key's. ``verifier``:
    streamable HTTP; the agent is the request's bearer key.
    """
    server = ImpriMCPServer(
        api_key=api_key,
        name="impri",
        title="Impri",
        description="Human approval for the actions of AI agents.",
        instructions=INSTRUCTIONS,
        token_verifier=verifier,
        auth=agent_auth(verifier),
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
