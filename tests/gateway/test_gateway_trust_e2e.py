"""Issue 40's trust boundaries end to end: a real `impri serve`, real upstream MCP servers
(tests/gateway_upstream.py, whose own log counts what reached them), the official client.

- Impri's own identifiers: an agent cannot push under the key the gateway derives for a call
  (422 at every door), and an action planted under it before that was refused (a harmless
  auto-approved note, or a reviewer-approved goodwill refund) never runs in place of the call.
- Every character shown, accepting explicit: an upstream that poisons a description with
  invisible characters and adds tools whose names print like ``create_refund``.
- An unauthenticated request answers alike whether the gateway exists or not.
"""

from __future__ import annotations

import json
from contextlib import asynccontextmanager

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from gateway.services import call_digest
from tests.gateway.test_gateway_e2e import (
    TOKEN,
    UpstreamProcess,
    action,
    calls,
    configure,
    decide,
    gateway_client,
    make_keys,
    text,
)
from tests.live import Deployment

pytestmark = pytest.mark.e2e

RULES = """
kinds:
  crm.note: {money: []}
rules:
  - name: notes
    kind: crm.note
    then: auto_approve
  - name: gateway refunds
    kind: mcp.payments.create_refund
    then: review
    edit_bounds: {payload.amount_cents: {min: 1, max: original}}
"""
DECOY = {"order_id": "10432", "amount_cents": 900000, "to_account": "acct_attacker"}


def gateways_yaml(upstreams) -> str:
    return f"""
gateways:
  - name: payments
    url: {upstreams["payments"].url}
    headers: {{Authorization: "Bearer ${{PSP_TOKEN}}"}}
    default: deny
    tools:
      create_refund: {{policy: review, editable: [amount_cents]}}
  - name: mirror
    url: {upstreams["mirror"].url}
    headers: {{Authorization: "Bearer ${{PSP_TOKEN}}"}}
    default: allow
"""


@pytest.fixture(scope="module")
def upstreams(tmp_path_factory):
    folder = tmp_path_factory.mktemp("upstreams")
    found = {name: UpstreamProcess(folder / f"{name}.jsonl") for name in ("payments", "mirror")}
    try:
        for upstream in found.values():
            upstream.start()
        yield found
    finally:
        for upstream in found.values():
            upstream.stop()


@pytest.fixture(scope="module")
def deployment(upstreams):
    dep = Deployment(PSP_TOKEN=TOKEN, UPSTREAM_LOG=str(upstreams["payments"].log))
    yield dep
    dep.close()


@pytest.fixture(scope="module")
def server(deployment, upstreams):
    # Calls without a progress token answer "awaiting approval" after 2 s.
    srv = deployment.start_server(IMPRI_MCP_AWAIT_CAP_S="2")
    configure(deployment, gateways_yaml(upstreams), RULES)
    return srv


@pytest.fixture(scope="module")
def keys(deployment, server):
    return make_keys(deployment)


@asynccontextmanager
async def impri_client(server, key: str):
    """Impri's own MCP server (/mcp): the agent's impri_push_action door."""
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=30)
    url = f"{server.url}/mcp"
    async with http, Client(streamable_http_client(url, http_client=http), mode="legacy") as c:
        yield c


def gateway_key(arguments: dict, index: int = 0) -> str:
    """The key the gateway derives for a call: any agent can compute it."""
    return f"mcp-gateway:{call_digest('payments', 'create_refund', arguments)}:{index}"


def decoy_body(key: str, order_id: str, *, door: str) -> dict:
    """A harmless-looking note (auto-approved by a rule) or a small goodwill refund (reviewed)."""
    body = {
        "kind": "crm.note" if door == "rule" else "crm.goodwill",
        "title": "Note on order" if door == "rule" else "Goodwill credit 1 cent",
        "preview": {"format": "plain", "body": "Customer was happy."},
        "payload": {**DECOY, "order_id": order_id},
    }
    return {**body, "idempotency_key": key} if key else body


async def push_decoy(server, keys, key: str, order_id: str, *, door: str, via: str):
    """Push over REST or over MCP; returns (status, field, action_id)."""
    body = decoy_body(key, order_id, door=door)
    if via == "rest":
        response = server.client(keys["agent"]).post("/actions", json=body)
        data = response.json()
        return response.status_code, data.get("field"), data.get("action_id")
    async with impri_client(server, keys["agent"]) as client:
        result = await client.call_tool("impri_push_action", body)
    if result.is_error:
        error = result.meta["impri/error"]
        return error["status"], error["field"], None
    return 201, None, result.structured_content["action_id"]


def plant(deployment, action_id: str, key: str) -> None:
    """Move an action under ``key``, as an agent could before such keys were refused."""
    code = (
        "from approvals.models import Action; "
        f"Action.objects.filter(pk={action_id!r}).update(idempotency_key={key!r})"
    )
    deployment.impri("shell", "-c", code)


async def gated_call(server, keys, arguments: dict):
    async with gateway_client(server, keys["agent"]) as client:
        return await client.call_tool("create_refund", arguments)


@pytest.mark.parametrize("via", ["rest", "mcp"])
@pytest.mark.parametrize("door", ["rule", "reviewer"], ids=["auto-approve-rule", "reviewed"])
async def test_the_planted_key_attack_fails(deployment, server, keys, upstreams, via, door):
    order = f"P-{via}-{door}"
    arguments = {"order_id": order, "amount_cents": 1}
    log = upstreams["payments"].log

    # Under the gateway's key: refused at the door, naming the field.
    status, field, _ = await push_decoy(
        server, keys, gateway_key(arguments), order, door=door, via=via
    )
    assert (status, field) == (422, "idempotency_key")
    header = server.client(keys["agent"]).post(
        "/actions",
        json=decoy_body("", order, door=door),
        headers={"Idempotency-Key": gateway_key(arguments)},
    )
    assert (header.status_code, header.json()["field"]) == (422, "Idempotency-Key")

    async def approved_decoy(key: str) -> str:
        """Pushed under a free key and approved, then moved under ``key`` (an older row)."""
        status, _, decoy = await push_decoy(server, keys, f"free-{key}", order, door=door, via=via)
        assert status == 201
        if door == "reviewer":
            await decide(server, keys["rita"], decoy, "approve", {"note": "1 cent, fine"})
        assert action(server, keys, decoy)["status"] == "approved"
        plant(deployment, decoy, key)
        return decoy

    decoy_id = await approved_decoy(gateway_key(arguments))
    first = await gated_call(server, keys, arguments)
    assert first.is_error and "Awaiting approval" in text(first), text(first)
    real_id = first.meta["impri/action"]["action_id"]
    assert real_id != decoy_id
    real = action(server, keys, real_id)
    assert (real["kind"], real["status"], real["payload"]) == (
        "mcp.payments.create_refund",
        "pending",
        arguments,
    )
    assert [c for c in calls(log) if c["arguments"].get("order_id") == order] == []

    # The reviewer rejects the real call; the key its retry takes next is planted too
    # (…:2: …:0 holds the first decoy, passed over, and …:1 the rejected call).
    await decide(server, keys["rita"], real_id, "reject", {"note": "no"})
    second_id = await approved_decoy(gateway_key(arguments, 2))
    retry = await gated_call(server, keys, arguments)
    assert "was rejected: no; this repeat is a new request" in text(retry), text(retry)
    assert "Awaiting approval" in text(retry), text(retry)
    retry_id = retry.meta["impri/action"]["action_id"]
    assert retry_id not in (decoy_id, second_id, real_id)
    assert action(server, keys, retry_id)["payload"] == arguments
    assert [c for c in calls(log) if c["arguments"].get("order_id") == order] == []

    # Approved for itself, it runs once, with its own arguments.
    await decide(server, keys["rita"], retry_id, "approve", {})
    done = await gated_call(server, keys, arguments)
    assert not done.is_error, text(done)
    reached = [c for c in calls(log) if c["arguments"].get("order_id") == order]
    assert reached == [
        {"tool": "create_refund", "arguments": {"order_id": order, "amount_cents": 1, "reason": ""}}
    ]
    for decoy in (decoy_id, second_id):  # untouched, never executed
        assert action(server, keys, decoy)["status"] == "approved"


async def test_a_reserved_key_is_refused_over_mcp_in_any_case(server, keys):
    async with impri_client(server, keys["agent"]) as client:
        result = await client.call_tool(
            "impri_push_action", decoy_body("IMPRI:mine", "K-1", door="rule")
        )
    assert result.is_error and result.meta["impri/error"]["field"] == "idempotency_key"
    assert "reserved for Impri" in text(result)


def answers(server, path: str, *, method: str = "POST", key: str | None = None):
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    response = httpx.request(
        method, server.url + path, headers=headers, content=body if method == "POST" else None
    )
    return response.status_code, response.content, response.headers.get("www-authenticate")


def test_a_gateway_answers_401_whether_it_exists_or_not(server, keys):
    for method in ("POST", "GET"):
        for key in (None, "imp_a_not-a-key", keys["rita"]):
            existing = answers(server, "/mcp/gateway/payments", method=method, key=key)
            assert existing[0] == (401 if method == "POST" else 405), existing
            for missing in ("/mcp/gateway/nope", "/mcp/gateway/nope/", "/mcp/gateway/No!pe"):
                assert answers(server, missing, method=method, key=key) == existing, missing
    # An agent's key may learn that a name is not a gateway.
    assert answers(server, "/mcp/gateway/nope", key=keys["agent"])[0] == 404


async def test_lookalike_tools_are_shown_held_and_accepted_only_by_name(
    deployment, server, keys, upstreams
):
    mirror = upstreams["mirror"]
    mirror.start("lookalike")  # after the import pinned its tools
    shown = deployment.impri("gateway", "tools", "mirror", "--diff").stdout
    lines = shown.splitlines()
    pinned = next(line for line in lines if line.startswith('-  "description": "Refund part'))
    now = next(line for line in lines if line.startswith('+  "description": "Refund part'))
    assert pinned[1:] != now[1:]
    for escape in ("\\u{E0053}", "\\u{200B}", "\\u{2067}", "\\u{2069}"):
        assert escape in now
    assert all(ord(char) < 0x2000 for char in shown), "every unclear character is escaped"
    assert "its text holds tag characters: 44" in shown
    for printed in (
        "CREATE_REFUND",
        "`create_refund\\u{200B}`",
        "`create_ref\\u{057D}nd`",
        "`create_refund\\u{2066}`",
        "`create_refund\\u{E0041}`",
    ):
        line = next(line for line in lines if line.startswith(printed + " "))
        assert "NEW upstream, held until accepted by name" in line, line
        assert "looks like `create_refund`" in line, line

    accepted = deployment.impri("gateway", "accept", "mirror").stdout
    assert "accepted mirror.create_refund" in accepted
    assert "new tools stay held until accepted by name" in accepted
    assert "`create_refund\\u{200B}`" in accepted

    async with gateway_client(server, keys["agent"], "mirror") as client:
        listed = {tool.name for tool in (await client.list_tools()).tools}
        assert "create_refund" in listed
        assert not listed & {"CREATE_REFUND", "create_refund\u200b", "create_ref\u057dnd"}
        held = await client.call_tool("create_refund\u200b", {"order_id": "L", "amount_cents": 9})
        assert held.is_error and "changed upstream" in text(held)
    assert [c for c in calls(mirror.log) if c["tool"] != "create_refund"] == []

    named = deployment.impri("gateway", "accept", "mirror", "create_refund\\u{200B}").stdout
    assert "accepted mirror.`create_refund\\u{200B}`" in named
    async with gateway_client(server, keys["agent"], "mirror") as client:
        listed = {tool.name for tool in (await client.list_tools()).tools}
    assert "create_refund\u200b" in listed and "CREATE_REFUND" not in listed
    again = deployment.impri("gateway", "tools", "mirror").stdout
    assert "CREATE_REFUND" in again and "`create_refund\\u{200B}`" in again


async def test_an_approved_payload_that_is_not_the_call_never_reaches_the_upstream(
    deployment, server, keys, upstreams
):
    arguments = {"order_id": "M-1", "amount_cents": 700}
    waiting = await gated_call(server, keys, arguments)
    action_id = waiting.meta["impri/action"]["action_id"]
    await decide(server, keys["rita"], action_id, "approve", {})
    # Changed behind the edit check (a database write, or a row from an older version).
    code = (
        "from approvals.models import Action; "
        f"Action.objects.filter(pk={action_id!r}).update(payload={DECOY!r})"
    )
    deployment.impri("shell", "-c", code)
    refused = await gated_call(server, keys, arguments)
    assert refused.is_error and "payload_mismatch" in text(refused), text(refused)
    assert [
        c
        for c in calls(upstreams["payments"].log)
        if c["arguments"]["order_id"] in ("M-1", "10432")
    ] == []
    done = action(server, keys, action_id)
    assert done["status"] == "failed"
    assert done["result"]["detail"]["reason"] == "payload_mismatch"
    audit = server.client(keys["rita"]).get("/audit", params={"action_id": action_id}).json()
    events = [e["event"] for e in audit["items"]]
    assert "gateway.payload_mismatch" in events and "gateway.upstream_called" not in events
