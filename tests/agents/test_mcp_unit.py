"""The MCP tools through the SDK's in-memory client against the server object.

Each tool's success path and its errors: the same validation and the same
401/403/404/409/422 semantics as REST, as tool errors whose text names the
field or the state problem, never a stack trace.
"""

from __future__ import annotations

import asyncio
import os
import time
from contextlib import asynccontextmanager

import anyio
import httpx
import pytest
from asgiref.sync import sync_to_async
from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.test import override_settings
from mcp import Client

from agent_doors.mcp import build_server, settle_waits
from agent_doors.mcp.http import AgentKeyVerifier, MCPHttpApp, transport_security
from approvals import events, services
from approvals.models import Action
from audit.models import AuditEvent
from identity import keys
from tests.factories import REFUND, make_action, refund_body
from tests.waits import until

pytestmark = pytest.mark.django_db(transaction=True)

TOOLS = {
    "impri_push_action",
    "impri_await_decision",
    "impri_report_result",
    "impri_get_action",
    "impri_cancel_action",
}


@asynccontextmanager
async def connect(key: str):
    async with Client(build_server(api_key=key)) as client:
        yield client


async def call(key: str, tool: str, arguments: dict, **kw):
    async with connect(key) as client:
        return await client.call_tool(tool, arguments, **kw)


def error_of(result) -> tuple[str, dict]:
    """The text a model reads and the REST-equivalent details, for an isError result."""
    assert result.is_error, result
    assert result.structured_content is None
    text = result.content[0].text
    assert "Traceback" not in text
    return text, result.meta["impri/error"]


async def push(key: str, **overrides) -> dict:
    result = await call(key, "impri_push_action", refund_body(**overrides))
    assert not result.is_error, result.content
    return result.structured_content


approve = sync_to_async(services.decide)


def audit_trail(action_id: str) -> list[str]:
    return list(
        AuditEvent.objects.for_action(action_id).order_by("seq").values_list("event", flat=True)
    )


def group_members(action_id: str) -> int:
    """How many channels (hubs) still listen for this action on the waiters' layer."""
    layer = get_channel_layer(events.WAKE_LAYER)
    group = events.action_group(action_id)
    if isinstance(layer, InMemoryChannelLayer):
        return len(layer.groups.get(group, {}))
    return redis_group_members(group)


def redis_group_members(group: str) -> int:
    """Subscribers of a group of channels_redis's pub/sub layer: the Redis channel
    ``<prefix>__group__<group>`` (the waiters' layer's prefix: ``asgi`` after
    IMPRI_REDIS_PREFIX, which each xdist worker sets)."""
    import redis
    from django.conf import settings

    prefix = settings.CHANNEL_LAYERS["waiting"]["CONFIG"]["prefix"]
    client = redis.Redis.from_url(os.environ["REDIS_URL"])
    [(_, count)] = client.pubsub_numsub(f"{prefix}__group__{group}")
    return count


# --- Listing --------------------------------------------------------------------


async def test_every_tool_is_listed_with_input_and_output_schemas(agent):
    async with connect(agent.key) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert set(tools) == TOOLS
    for tool in tools.values():
        assert tool.output_schema is not None, tool.name
        assert tool.description
    push_schema = tools["impri_push_action"].input_schema
    assert set(push_schema["required"]) == {"kind", "title", "preview", "payload"}
    assert "ctx" not in push_schema["properties"]
    assert tools["impri_await_decision"].input_schema["required"] == ["action_id"]
    decision = tools["impri_await_decision"].output_schema["properties"]
    assert {"status", "payload", "preview", "edited_by_human", "decided_by", "note"} <= set(
        decision
    )


async def test_descriptions_tell_the_model_to_act_only_on_the_returned_payload(agent):
    async with connect(agent.key) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        instructions = client.instructions
    waiting = tools["impri_await_decision"].description
    assert '"pending"' in waiting and "call impri_await_decision" in waiting
    assert "execute exactly the payload returned here" in waiting
    assert "impri_await_decision" in tools["impri_push_action"].description
    assert "payload that" in instructions and "impri_await_decision returned" in instructions


# --- impri_push_action ------------------------------------------------------------------


async def test_the_seed_refund_is_pushed_pending(agent):
    result = await call(agent.key, "impri_push_action", REFUND)
    assert not result.is_error
    out = result.structured_content
    assert out["status"] == "pending"
    assert isinstance(out["created_at"], int) and isinstance(out["expires_at"], int)
    assert out["inbox_url"].endswith(f"/inbox/actions/{out['action_id']}")
    action = await Action.objects.select_related("agent").aget(pk=out["action_id"])
    assert action.agent.name == "support-bot"
    assert action.payload == REFUND["payload"]
    assert action.editable == ["payload.amount_cents"]
    assert await AuditEvent.objects.filter(action_id=action.pk, event="action.pushed").aexists()


async def test_a_replayed_idempotency_key_returns_the_same_action(agent):
    first = await push(agent.key, idempotency_key="refund-10432")
    again = await push(agent.key, idempotency_key="refund-10432")
    assert again["action_id"] == first["action_id"]
    assert again["created_at"] == first["created_at"]
    assert await Action.objects.acount() == 1


async def test_the_same_idempotency_key_with_another_body_is_a_conflict(agent):
    await push(agent.key, idempotency_key="refund-10432")
    result = await call(
        agent.key,
        "impri_push_action",
        refund_body(idempotency_key="refund-10432", title="Refund $1.00 on order 10432"),
    )
    text, error = error_of(result)
    assert error["status"] == 409
    assert text.startswith("Conflict: idempotency_key 'refund-10432' was already used")


@pytest.mark.parametrize(
    ("overrides", "field", "words"),
    [
        ({"kind": "Payment Refund"}, "kind", "dotted lowercase words"),
        ({"editable": ["payload.total"]}, "editable", "does not exist in payload"),
        ({"target_url": "javascript:alert(1)"}, "target_url", "http:// or https://"),
        ({"preview": {"format": "html", "body": "x"}}, "preview.format", "'plain', 'markdown'"),
        ({"expires_in_s": 0}, "expires_in_s", "greater than or equal to 1"),
        ({"expires_in_s": True}, "expires_in_s", "valid integer"),
        ({"expires_in_s": "3600"}, "expires_in_s", "valid integer"),
        ({"title": "two\nlines"}, "title", "single line"),
    ],
)
async def test_invalid_input_is_refused_naming_the_field(agent, overrides, field, words):
    result = await call(agent.key, "impri_push_action", refund_body(**overrides))
    text, error = error_of(result)
    assert error["status"] == 422
    assert error["field"] == field
    assert text.startswith(f"Invalid input: {field}: ")
    assert words in text
    assert await Action.objects.acount() == 0


async def test_a_missing_argument_is_named(agent):
    body = refund_body()
    del body["payload"]
    text, error = error_of(await call(agent.key, "impri_push_action", body))
    assert error["field"] == "payload"
    assert "payload: Field required" in text


async def test_an_unknown_argument_is_refused_not_dropped(agent):
    body = refund_body(amount=5000)
    text, error = error_of(await call(agent.key, "impri_push_action", body))
    assert error == {
        "status": 422,
        "code": "invalid",
        "field": "amount",
        "detail": error["detail"],
    }
    assert "amount: unknown argument" in text
    assert await Action.objects.acount() == 0


# --- Identity -------------------------------------------------------------------------------


async def test_an_unknown_key_is_not_authenticated(db):
    text, error = error_of(await call("imp_a_not-a-real-key", "impri_push_action", REFUND))
    assert error["status"] == 401
    assert text.startswith("Not authenticated:")


async def test_a_reviewer_token_cannot_act_as_an_agent(rita):
    text, error = error_of(await call(rita.key, "impri_push_action", REFUND))
    assert error["status"] == 403
    assert "reviewer token" in text


async def test_a_key_revoked_mid_session_stops_working_at_once(agent):
    async with connect(agent.key) as client:
        first = await client.call_tool("impri_push_action", REFUND)
        assert not first.is_error
        key = await agent.agent.keys.aget()
        await sync_to_async(keys.revoke_key)(key)
        second = await client.call_tool(
            "impri_get_action", {"action_id": first.structured_content["action_id"]}
        )
    assert error_of(second)[1]["status"] == 401


# --- impri_await_decision -------------------------------------------------------------------


async def test_an_edited_approval_returns_the_edited_payload_and_a_diff(agent, rita):
    action = await sync_to_async(make_action)(agent.agent)
    await approve(
        action.pk,
        by=rita.user,
        verdict="approve",
        edits={"payload.amount_cents": 5000},
        note="half",
    )
    result = await call(
        agent.key, "impri_await_decision", {"action_id": action.pk, "timeout_s": 10}
    )
    decision = result.structured_content
    assert decision["status"] == "approved"
    assert decision["payload"]["amount_cents"] == 5000
    assert decision["edited_by_human"] is True
    assert decision["decided_by"] == {"type": "reviewer", "name": "rita"}
    assert decision["note"] == "half"
    assert decision["preview"]["format"] == "diff"
    assert '-  "amount_cents": 8400' in decision["preview"]["body"]
    assert '+  "amount_cents": 5000' in decision["preview"]["body"]


@override_settings(IMPRI_AWAIT_REREAD_S=30)
async def test_a_waiter_wakes_when_a_reviewer_decides(agent, rita):
    action = await sync_to_async(make_action)(agent.agent)
    waiter = asyncio.create_task(
        call(agent.key, "impri_await_decision", {"action_id": action.pk, "timeout_s": 20})
    )
    await until(lambda: group_members(action.pk) == 1)  # it joined the group and blocks
    assert not waiter.done()
    await approve(action.pk, by=rita.user, verdict="reject", note="not our fault")
    # The re-read interval is 30 s: returning within 5 s means the message woke it.
    result = await asyncio.wait_for(waiter, 5)
    assert result.structured_content["status"] == "rejected"
    assert result.structured_content["note"] == "not our fault"


async def test_nobody_deciding_is_a_pending_result_not_an_error(agent):
    action = await sync_to_async(make_action)(agent.agent)
    result = await call(
        agent.key, "impri_await_decision", {"action_id": action.pk, "timeout_s": 0.2}
    )
    assert not result.is_error
    assert result.structured_content["status"] == "pending"
    assert result.structured_content["payload"] == REFUND["payload"]


@override_settings(IMPRI_MCP_AWAIT_CAP_S=0.5, IMPRI_MCP_PROGRESS_EVERY_S=0.1)
async def test_without_a_progress_token_the_wait_stops_at_the_cap(agent):
    action = await sync_to_async(make_action)(agent.agent)
    started = time.monotonic()
    result = await call(
        agent.key, "impri_await_decision", {"action_id": action.pk, "timeout_s": 30}
    )
    assert result.structured_content["status"] == "pending"
    assert time.monotonic() - started < 5


@override_settings(IMPRI_MCP_AWAIT_CAP_S=0.2, IMPRI_MCP_PROGRESS_EVERY_S=0.1)
async def test_with_a_progress_token_the_wait_reports_progress_past_the_cap(agent):
    action = await sync_to_async(make_action)(agent.agent)
    updates = []

    async def on_progress(progress, total, message):
        updates.append((progress, total, message))

    started = time.monotonic()
    result = await call(
        agent.key,
        "impri_await_decision",
        {"action_id": action.pk, "timeout_s": 0.5},
        progress_callback=on_progress,
        meta={"progress_token": "wait-1"},
    )
    assert result.structured_content["status"] == "pending"
    assert time.monotonic() - started >= 0.5  # the cap is for calls without a token
    assert len(updates) >= 3
    assert [p for p, _, _ in updates] == sorted(p for p, _, _ in updates)
    assert all(total == 0.5 for _, total, _ in updates)
    assert updates[0][2] == "waiting for a reviewer in reviewers, 0 s so far"


@override_settings(IMPRI_MAX_AWAIT_S=0.3)
async def test_the_wait_never_exceeds_the_maximum(agent):
    action = await sync_to_async(make_action)(agent.agent)
    started = time.monotonic()
    result = await call(
        agent.key,
        "impri_await_decision",
        {"action_id": action.pk, "timeout_s": 60},
        meta={"progress_token": 1},
    )
    assert result.structured_content["status"] == "pending"
    assert time.monotonic() - started < 5


@override_settings(IMPRI_AWAIT_REREAD_S=30)
async def test_a_cancelled_wait_leaves_the_action_pending_and_its_group(agent):
    action = await sync_to_async(make_action)(agent.agent)
    trail = await sync_to_async(audit_trail)(action.pk)
    async with anyio.create_task_group() as tg:
        # Cancelled through an anyio cancel scope, as the SDK cancels a tool whose
        # client hung up: every await inside is cancelled, not just the first one.
        tg.start_soon(
            call, agent.key, "impri_await_decision", {"action_id": action.pk, "timeout_s": 20}
        )
        await until(lambda: group_members(action.pk) == 1)  # the wait joined its group
        tg.cancel_scope.cancel()
    await settle_waits()
    assert await sync_to_async(group_members)(action.pk) == 0
    await action.arefresh_from_db()
    assert action.status == "pending"
    assert await sync_to_async(audit_trail)(action.pk) == trail  # the wait left no trace


async def test_waiting_on_another_agents_action_is_forbidden(agent, other_agent):
    action = await sync_to_async(make_action)(other_agent.agent)
    text, error = error_of(await call(agent.key, "impri_await_decision", {"action_id": action.pk}))
    assert error["status"] == 403
    assert "belongs to another agent" in text


async def test_waiting_on_an_unknown_action_is_not_found(agent):
    text, error = error_of(await call(agent.key, "impri_await_decision", {"action_id": "act_nope"}))
    assert error["status"] == 404
    assert text == "Not found: no action 'act_nope' is visible to you"


async def test_a_negative_timeout_names_the_field(agent):
    action = await sync_to_async(make_action)(agent.agent)
    text, error = error_of(
        await call(agent.key, "impri_await_decision", {"action_id": action.pk, "timeout_s": -1})
    )
    assert error["field"] == "timeout_s"
    assert "greater than or equal to 0" in text


# --- impri_report_result ----------------------------------------------------------------------


@pytest.fixture
def approved(agent, rita):
    action = make_action(agent.agent)
    return services.decide(
        action.pk, by=rita.user, verdict="approve", edits={"payload.amount_cents": 5000}
    )


async def test_the_agent_reports_execution(approved, agent):
    detail = {"transaction_id": "re_3PqK9L2e"}
    result = await call(
        agent.key,
        "impri_report_result",
        {"action_id": approved.pk, "status": "executed", "detail": detail},
    )
    out = result.structured_content
    assert (out["action_id"], out["status"]) == (approved.pk, "executed")
    assert out["result"]["detail"] == detail and isinstance(out["result"]["reported_at"], int)
    await approved.arefresh_from_db()
    assert approved.status == "executed"
    assert approved.result_detail == detail
    assert await AuditEvent.objects.filter(action_id=approved.pk, event="result.reported").aexists()


async def test_the_same_report_twice_is_harmless_and_another_is_a_conflict(approved, agent):
    report = {"action_id": approved.pk, "status": "failed", "detail": "card expired"}
    assert not (await call(agent.key, "impri_report_result", report)).is_error
    assert not (await call(agent.key, "impri_report_result", report)).is_error
    text, error = error_of(
        await call(agent.key, "impri_report_result", {**report, "status": "executed"})
    )
    assert error["status"] == 409
    assert "already has a result (failed)" in text


async def test_reporting_on_a_pending_action_is_a_conflict(agent):
    action = await sync_to_async(make_action)(agent.agent)
    text, error = error_of(
        await call(agent.key, "impri_report_result", {"action_id": action.pk, "status": "executed"})
    )
    assert error["status"] == 409
    assert "only an approved action can have a result reported" in text


async def test_an_unknown_result_status_names_the_field(approved, agent):
    text, error = error_of(
        await call(agent.key, "impri_report_result", {"action_id": approved.pk, "status": "done"})
    )
    assert error["field"] == "status"
    assert "'executed' or 'failed'" in text


# --- impri_get_action and impri_cancel_action ------------------------------------------------------


async def test_the_agent_reads_its_action(approved, agent):
    result = await call(agent.key, "impri_get_action", {"action_id": approved.pk})
    out = result.structured_content
    assert out["status"] == "approved"
    assert out["payload"]["amount_cents"] == 5000
    assert out["original_payload"]["amount_cents"] == 8400
    assert out["decided_by"] == {"type": "reviewer", "name": "rita"}


async def test_reading_another_agents_action_is_forbidden(approved, other_agent):
    text, error = error_of(
        await call(other_agent.key, "impri_get_action", {"action_id": approved.pk})
    )
    assert error["status"] == 403


async def test_the_agent_cancels_a_pending_action(agent):
    action = await sync_to_async(make_action)(agent.agent)
    result = await call(
        agent.key, "impri_cancel_action", {"action_id": action.pk, "reason": "customer withdrew"}
    )
    assert result.structured_content["status"] == "cancelled"
    await action.arefresh_from_db()
    assert action.status == "cancelled"
    assert action.note == "customer withdrew"


async def test_cancelling_a_decided_action_is_a_conflict(approved, agent):
    text, error = error_of(await call(agent.key, "impri_cancel_action", {"action_id": approved.pk}))
    assert error["status"] == 409
    assert error["code"] == "not_pending"
    assert f"action {approved.pk} is approved, not pending" in text


# --- The HTTP app, in process ---------------------------------------------------------------

LIST_TOOLS = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
MCP_HEADERS = {
    "Accept": "application/json, text/event-stream",
    "Mcp-Protocol-Version": "2025-06-18",
}


@asynccontextmanager
async def http_app():
    app = MCPHttpApp(build_server(verifier=AgentKeyVerifier()))
    transport = httpx.ASGITransport(app=app)
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8000") as http:
            yield app, http
    finally:
        await app.stop()


async def test_the_verifier_accepts_agent_keys_only(agent, rita):
    verifier = AgentKeyVerifier()
    token = await verifier.verify_token(agent.key)
    assert token.client_id == "support-bot"
    assert token.principal.agent == agent.agent
    assert agent.key not in token.model_dump_json()
    assert await verifier.verify_token(rita.key) is None
    assert await verifier.verify_token("imp_a_" + "x" * 40) is None


@override_settings(IMPRI_RATE_LIMIT_PER_MIN=2)
async def test_a_rate_limited_key_gets_a_429_not_a_401(agent):
    headers = {**MCP_HEADERS, "Authorization": f"Bearer {agent.key}"}
    async with http_app() as (_, http):
        responses = [await http.post("/mcp", json=LIST_TOOLS, headers=headers) for _ in range(3)]
    assert [response.status_code for response in responses] == [200, 200, 429]
    assert "impri_push_action" in responses[0].text
    assert responses[2].json()["code"] == "rate_limited"
    assert 1 <= int(responses[2].headers["retry-after"]) <= 60  # until the minute turns


async def test_a_server_with_lifespan_starts_and_stops_mcp(agent):
    app = MCPHttpApp(build_server(verifier=AgentKeyVerifier()))
    inbox: asyncio.Queue = asyncio.Queue()
    sent: asyncio.Queue = asyncio.Queue()
    lifespan = asyncio.create_task(app({"type": "lifespan"}, inbox.get, sent.put))
    await inbox.put({"type": "lifespan.startup"})
    assert (await asyncio.wait_for(sent.get(), 5))["type"] == "lifespan.startup.complete"
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost:8000") as http:
        headers = {**MCP_HEADERS, "Authorization": f"Bearer {agent.key}"}
        assert (await http.post("/mcp", json=LIST_TOOLS, headers=headers)).status_code == 200
    await inbox.put({"type": "lifespan.shutdown"})
    assert (await asyncio.wait_for(sent.get(), 5))["type"] == "lifespan.shutdown.complete"
    await asyncio.wait_for(lifespan, 5)


def test_allowed_hosts_become_the_transport_security_settings():
    security = transport_security(
        ["impri.example.com", ".example.org"], ["https://ops.example.com"]
    )
    assert security.enable_dns_rebinding_protection
    assert {"impri.example.com", "impri.example.com:*", "example.org"} <= set(
        security.allowed_hosts
    )
    assert {"https://impri.example.com", "https://ops.example.com"} <= set(security.allowed_origins)
    assert "evil.example" not in security.allowed_hosts
    # Django's "*" accepts any host, and so does /mcp.
    assert not transport_security(["*"], []).enable_dns_rebinding_protection


# --- Crashes --------------------------------------------------------------------------------


async def test_an_unexpected_crash_shows_no_internals(agent):
    server = build_server(api_key=agent.key)

    async def impri_broken() -> str:
        raise RuntimeError("password=hunter2 in /srv/impri/secret.py")

    from mcp_types import ToolAnnotations

    server.register(impri_broken, title="broken", annotations=ToolAnnotations())
    async with Client(server) as client:
        result = await client.call_tool("impri_broken", {})
    assert result.is_error
    assert result.content[0].text == "Error executing tool impri_broken"


async def test_push_takes_a_callback_url_like_rest(agent, settings):
    settings.IMPRI_CALLBACK_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    pushed = await push(agent.key, callback_url="http://127.0.0.1:9/impri-hook")
    action = await Action.objects.aget(pk=pushed["action_id"])
    assert action.callback_url == "http://127.0.0.1:9/impri-hook"


async def test_report_takes_the_grant(approved, agent):
    decision = await call(agent.key, "impri_await_decision", {"action_id": approved.pk})
    grant = decision.structured_content["grant"]
    result = await call(
        agent.key,
        "impri_report_result",
        {"action_id": approved.pk, "status": "executed", "detail": "ok", "grant": grant},
    )
    assert not result.is_error, result.content
    assert result.structured_content["result"]["detail"] == "ok"


async def test_an_editable_entry_may_narrow_the_bounds(agent):
    body = {**REFUND, "editable": [{"path": "payload.amount_cents", "min": 4000, "max": 8000}]}
    result = await call(agent.key, "impri_push_action", body)
    assert not result.is_error, result
    action = await Action.objects.aget(pk=result.structured_content["action_id"])
    assert action.editable == ["payload.amount_cents"]
    assert action.edit_bounds == {"payload.amount_cents": {"min": 4000, "max": 8000}}


async def test_an_editable_bound_above_its_max_is_refused_naming_editable(agent):
    body = {**REFUND, "editable": [{"path": "payload.amount_cents", "min": 9000, "max": 10}]}
    text, _ = error_of(await call(agent.key, "impri_push_action", body))
    assert "editable" in text and "min must not be above max" in text
    assert not await Action.objects.aexists()
