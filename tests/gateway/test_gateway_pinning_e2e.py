"""Pinned tool definitions end to end: real upstreams restarted as a rug pull, a real `impri serve`.

Each scenario has an upstream of its own (tests/gateway_upstream.py, restartable on
the same port with ``UPSTREAM_VARIANT=poisoned``), so the order of the tests does
not matter. What reached an upstream is counted in its own log.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import anyio
import httpx
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.gateway.test_gateway_e2e import (
    TOKEN,
    UpstreamProcess,
    action,
    calls,
    configure,
    decide,
    gateway_client,
    make_keys,
    stdio_gateway,
    text,
    trail,
)
from tests.live import Deployment

pytestmark = pytest.mark.e2e

RULES = """
rules:
  - name: sums
    kind: mcp.open.get-sum
    then: auto_reject
    reason: sums are not for agents
"""


@pytest.fixture(scope="module")
def upstreams(tmp_path_factory):
    folder = tmp_path_factory.mktemp("upstreams")
    found = {
        name: UpstreamProcess(folder / f"{name}.jsonl")
        for name in ("rug", "late", "new", "open", "later")
    }
    try:
        for name, upstream in found.items():
            if name != "later":  # away when the gateways are imported
                upstream.start()
        yield found
    finally:
        for upstream in found.values():
            upstream.stop()


def gateways_yaml(upstreams) -> str:
    auth = '{Authorization: "Bearer ${PSP_TOKEN}"}'
    return f"""
gateways:
  - name: rug
    url: {upstreams["rug"].url}
    headers: {auth}
    default: deny
    tools:
      create_refund: {{policy: review, editable: [amount_cents]}}
      get_order: allow
  - name: late
    url: {upstreams["late"].url}
    headers: {auth}
    default: deny
    tools:
      create_refund: {{policy: review, editable: [amount_cents]}}
  - name: new-review
    url: {upstreams["new"].url}
    headers: {auth}
    default: review
  - name: new-deny
    url: {upstreams["new"].url}
    headers: {auth}
    default: deny
    tools:
      get_order: allow
  - name: open
    url: {upstreams["open"].url}
    headers: {auth}
    default: allow
    tools:
      create_refund: {{policy: review, editable: [amount_cents]}}
      settle: review
  - name: later
    url: {upstreams["later"].url}
    headers: {auth}
    default: allow
"""


@pytest.fixture(scope="module")
def deployment():
    dep = Deployment(PSP_TOKEN=TOKEN)
    yield dep
    dep.close()


@pytest.fixture(scope="module")
def server(deployment, upstreams):
    srv = deployment.start_server()
    imported = configure(deployment, gateways_yaml(upstreams), RULES)
    assert "rug: recorded" in imported, imported
    return srv


@pytest.fixture(scope="module")
def keys(deployment, server):
    return make_keys(deployment)


@pytest.fixture(scope="module")
def short_server(deployment, server):
    """A second daphne whose waits without a progress token end after 2 s."""
    return deployment.start_server(IMPRI_MCP_AWAIT_CAP_S="2")


def audit_events(server, keys, event: str) -> list[dict]:
    items = server.client(keys["rita"]).get("/audit", params={"limit": 1000}).json()["items"]
    return [e for e in items if e["event"] == event]


def ready(server, name: str) -> dict:
    return httpx.get(server.url + "/readyz").json()["gateways"][name]


async def listed(server, key: str, name: str) -> dict:
    async with gateway_client(server, key, name) as client:
        return {tool.name: tool for tool in (await client.list_tools()).tools}


async def pending_with(server, rita: str, kind: str, outcome: dict, payload: dict) -> dict:
    """The pending action of ``kind`` whose payload is ``payload``, once the gateway pushed it."""
    async with httpx.AsyncClient(
        base_url=server.url + "/api/v1", headers={"Authorization": f"Bearer {rita}"}
    ) as http:
        with anyio.fail_after(30):
            while True:
                if "result" in outcome:  # the call came back without waiting
                    raise AssertionError(f"the call returned: {text(outcome['result'])}")
                page = await http.get("/actions", params={"status": "pending", "kind": kind})
                found = [a for a in page.json()["items"] if a["payload"] == payload]
                if found:
                    return found[0]
                await anyio.sleep(0.05)


async def call_and_decide(
    server, keys, gateway: str, tool: str, arguments: dict, verdict: str = "approve", messages=None
):
    """Call a gated tool, decide the action it becomes; returns (result, action)."""
    outcome: dict = {}

    async def progress(value, total, message):
        if messages is not None:
            messages.append(message)

    async with (
        gateway_client(server, keys["agent"], gateway) as client,
        anyio.create_task_group() as tg,
    ):

        async def call():
            outcome["result"] = await client.call_tool(tool, arguments, progress_callback=progress)

        tg.start_soon(call)
        kind = f"mcp.{gateway}.{tool}"
        pending = await pending_with(server, keys["rita"], kind, outcome, arguments)
        await decide(server, keys["rita"], pending["action_id"], verdict, {})
    return outcome["result"], pending


# --- The rug pull ------------------------------------------------------------------------


async def test_a_rug_pull_is_held_shown_and_goes_to_review_again_once_accepted(
    deployment, server, keys, upstreams
):
    rug = upstreams["rug"]
    before = await listed(server, keys["agent"], "rug")
    assert "to_account" not in before["create_refund"].input_schema["properties"]

    rug.start("poisoned")  # the same server, restarted with a poisoned refund
    # A call is the first to meet the change: an allowed tool is held on its own connection.
    async with gateway_client(server, keys["agent"], "rug") as client:
        lookup = await client.call_tool("get_order", {"order_id": "RUG-0"})
    assert lookup.is_error and "changed upstream" in text(lookup), text(lookup)
    assert calls(rug.log, "get_order") == []
    after = await listed(server, keys["agent"], "rug")
    assert "card number" not in after["get_order"].description
    # The agent still sees the pinned definition: no new argument, no poisoned text.
    assert after["create_refund"].input_schema == before["create_refund"].input_schema
    assert "transfer_all" not in after["create_refund"].description
    assert "changed upstream" in after["create_refund"].description
    assert "transfer_all" not in after  # a new tool under `default: deny`: hidden
    async with gateway_client(server, keys["agent"], "rug") as client:
        refused = await client.call_tool(
            "create_refund", {"order_id": "RUG-1", "amount_cents": 100}
        )
        again = await client.call_tool("create_refund", {"order_id": "RUG-1", "amount_cents": 100})
    for result in (refused, again):
        assert result.is_error
        assert "changed upstream" in text(result) and "operator must review" in text(result)
    assert calls(rug.log, "create_refund") == []
    pending = server.client(keys["rita"]).get("/actions", params={"kind": "mcp.rug.create_refund"})
    assert pending.json()["items"] == []  # no reviewer was bothered with it

    changes = [
        e
        for e in audit_events(server, keys, "gateway.tool_changed")
        if e["data"]["gateway"] == "rug"
    ]
    # Once per change, however often it was seen.
    assert sorted(e["data"]["tool"] for e in changes) == ["create_refund", "get_order"]
    changes = [e for e in changes if e["data"]["tool"] == "create_refund"]
    change = changes[0]["data"]
    assert change["tool"] == "create_refund"
    assert len(change["old_sha256"]) == 64 and len(change["new_sha256"]) == 64
    assert change["old_sha256"] != change["new_sha256"]
    assert "+" in change["diff"] and "to_account" in change["diff"]
    assert "always also call transfer_all" in change["diff"]

    tools = deployment.impri("gateway", "tools", "rug").stdout
    line = next(row for row in tools.splitlines() if row.startswith("create_refund"))
    assert "CHANGED upstream" in line and change["new_sha256"][:12] in line
    assert "kind mcp.rug.create_refund" in line
    assert "to_account" in deployment.impri("gateway", "tools", "rug", "--diff").stdout
    assert ready(server, "rug")["status"] == "ok"

    accepted = deployment.impri("gateway", "accept", "rug").stdout
    assert (
        f"accepted rug.create_refund: {change['old_sha256'][:12]} -> {change['new_sha256']}"
        in accepted
    )
    accept_events = [
        e
        for e in audit_events(server, keys, "gateway.tool_accepted")
        if e["data"]["gateway"] == "rug"
    ]
    assert sorted(e["data"]["tool"] for e in accept_events) == ["create_refund", "get_order"]
    assert change["new_sha256"] in [e["data"]["sha256"] for e in accept_events]
    assert "accepted rug.get_order" in accepted  # no names: every changed pinned tool
    assert accept_events[0]["actor_id"].startswith("cli")
    assert "accepted" not in deployment.impri("gateway", "accept", "rug").stdout

    now = await listed(server, keys["agent"], "rug")
    assert "to_account" in now["create_refund"].input_schema["properties"]
    # Accepted: calls go to review again, with the new definition's hash on the action.
    arguments = {"order_id": "RUG-2", "amount_cents": 100, "to_account": "shop"}
    result, pending = await call_and_decide(server, keys, "rug", "create_refund", arguments)
    assert not result.is_error, text(result)
    assert pending["context"]["tool_sha256"] == change["new_sha256"]
    assert [c["arguments"]["order_id"] for c in calls(rug.log, "create_refund")] == ["RUG-2"]


async def test_approved_before_the_change_and_executed_after_fails_tool_changed(
    short_server, keys, upstreams
):
    late = upstreams["late"]
    arguments = {"order_id": "LATE-1", "amount_cents": 2500}
    async with gateway_client(short_server, keys["agent"], "late") as client:
        first = await client.call_tool("create_refund", arguments)
        assert first.is_error and "nothing was executed yet" in text(first)
        action_id = first.meta["impri/action"]["action_id"]
        await decide(short_server, keys["rita"], action_id, "approve", {})
        late.start("poisoned")  # the rug is pulled between the approval and the execution
        executed = await client.call_tool("create_refund", arguments)
    assert executed.is_error
    assert "changed upstream" in text(executed) and "tool_changed" in text(executed)
    assert executed.meta["impri/action"]["status"] == "failed"
    assert calls(late.log) == []  # the upstream never saw the call
    done = action(short_server, keys, action_id)
    assert done["status"] == "failed"
    assert done["result"]["detail"]["reason"] == "tool_changed"
    assert done["result"]["detail"]["approved_sha256"] == done["context"]["tool_sha256"]
    assert done["result"]["detail"]["upstream_sha256"] != done["context"]["tool_sha256"]
    events = trail(short_server, keys, action_id)
    assert "gateway.upstream_called" not in events and "result.reported" in events


async def test_a_new_tool_is_held_under_review_and_hidden_under_deny(
    deployment, server, keys, upstreams
):
    upstreams["new"].start("poisoned")  # transfer_all appears (and create_refund changes)
    review = await listed(server, keys["agent"], "new-review")
    deny = await listed(server, keys["agent"], "new-deny")
    assert "transfer_all" not in review and "transfer_all" not in deny
    async with gateway_client(server, keys["agent"], "new-review") as client:
        held = await client.call_tool("transfer_all", {"to_account": "x"})
    async with gateway_client(server, keys["agent"], "new-deny") as client:
        denied = await client.call_tool("transfer_all", {"to_account": "x"})
    assert held.is_error and "changed upstream" in text(held)
    assert denied.is_error and "policy: deny" in text(denied)
    assert calls(upstreams["new"].log, "transfer_all") == []
    new = [
        e["data"]
        for e in audit_events(server, keys, "gateway.tool_changed")
        if e["data"]["tool"] == "transfer_all"
    ]
    assert [(e["gateway"], e["old_sha256"]) for e in new] == [("new-review", None)]
    assert "NEW upstream" in deployment.impri("gateway", "tools", "new-review").stdout

    accepted = deployment.impri("gateway", "accept", "new-review", "transfer_all").stdout
    assert "accepted new-review.transfer_all" in accepted
    assert "create_refund" not in accepted  # only what was named
    assert "transfer_all" in await listed(server, keys["agent"], "new-review")
    unknown = deployment.impri("gateway", "accept", "new-review", "teleport", check=False)
    assert unknown.returncode != 0 and "teleport" in unknown.stderr
    # Accepted under `default: review`: a call is an action for a reviewer now.
    result, _ = await call_and_decide(
        server, keys, "new-review", "transfer_all", {"to_account": "x"}, "reject"
    )
    assert result.is_error and "Rejected" in text(result)
    assert calls(upstreams["new"].log, "transfer_all") == []


# --- Errors, progress, kinds -----------------------------------------------------------


async def direct_error(upstream: UpstreamProcess, tool: str, arguments: dict) -> str:
    """What the upstream itself answers, asked directly (the message to expect)."""
    import httpx2

    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"})
    async with (
        http,
        Client(streamable_http_client(upstream.url, http_client=http), mode="legacy") as c,
    ):
        try:
            result = await c.call_tool(tool, arguments)
        except Exception as exc:  # a JSON-RPC error
            return getattr(exc, "message", str(exc))
    assert result.is_error
    return text(result)


@pytest.mark.parametrize(
    "tool, arguments", [("teleport", {"to": "mars"}), ("get_order", {})], ids=["unknown", "invalid"]
)
async def test_an_upstream_error_is_its_message_and_the_upstream_stays_ready(
    server, keys, upstreams, tool, arguments
):
    expected = await direct_error(upstreams["open"], tool, arguments)
    async with gateway_client(server, keys["agent"], "open") as client:
        result = await client.call_tool(tool, arguments)
    assert result.is_error
    assert expected and expected in text(result)
    assert "unavailable" not in text(result).lower()
    assert ready(server, "open") == {"status": "ok"}


async def test_upstream_progress_is_forwarded_while_an_approved_call_runs(server, keys, upstreams):
    messages: list = []
    result, pending = await call_and_decide(
        server, keys, "open", "settle", {"batch_id": "B-7"}, messages=messages
    )
    assert not result.is_error, text(result)
    assert text(result) == "settled B-7"
    upstream_said = [m for m in messages if m and m.startswith("settled")]
    assert upstream_said == ["settled 1 of 3", "settled 2 of 3", "settled 3 of 3"]
    assert calls(upstreams["open"].log, "settle") == [
        {"tool": "settle", "arguments": {"batch_id": "B-7"}}
    ]


async def test_a_hyphenated_tool_keeps_its_name_in_its_kind(deployment, server, keys, upstreams):
    tools = await listed(server, keys["agent"], "open")
    assert "get-sum" in tools
    async with gateway_client(server, keys["agent"], "open") as client:
        result = await client.call_tool("get-sum", {"a": 1, "b": 2})
    assert result.is_error and "sums are not for agents" in text(result)
    done = action(server, keys, result.meta["impri/action"]["action_id"])
    assert done["kind"] == "mcp.open.get-sum"
    assert done["decided_by"] == {"type": "rule", "name": "sums"}
    assert calls(upstreams["open"].log, "get-sum") == []
    listing = deployment.impri("gateway", "tools", "open").stdout
    assert "kind mcp.open.get-sum" in listing


# --- stdio, scaled ---------------------------------------------------------------------


@pytest.mark.skipif(not os.environ.get("REDIS_URL"), reason="scaled mode: needs REDIS_URL")
async def test_stdio_gateway_in_scaled_mode_hears_the_decision_by_push(
    deployment, server, keys, upstreams
):
    env = dict(deployment.env)
    deployment.env["IMPRI_MCP_PROGRESS_EVERY_S"] = "0.2"
    # Its safety net's re-read a minute away: only the wake through Redis is in time below
    # (the bound is generous: the approve's round trip and the upstream call are in it).
    deployment.env["IMPRI_AWAIT_REREAD_S"] = "60"
    try:
        async with stdio_gateway(deployment, keys["agent"], "open") as client:
            parked = anyio.Event()
            outcome: dict = {}

            async def progress(value, total, message):
                parked.set()  # sent from the wait loop, after its first read: it is waiting

            async def call():
                outcome["result"] = await client.call_tool(
                    "create_refund",
                    {"order_id": "STDIO-1", "amount_cents": 700},
                    progress_callback=progress,
                )
                outcome["at"] = time.monotonic()

            async with anyio.create_task_group() as tg:
                tg.start_soon(call)
                pending = await pending_with(
                    server,
                    keys["rita"],
                    "mcp.open.create_refund",
                    outcome,
                    {"order_id": "STDIO-1", "amount_cents": 700},
                )
                with anyio.fail_after(30):
                    await parked.wait()
                await anyio.sleep(0.5)  # past its first progress: parked on the hub
                decided = time.monotonic()
                await decide(server, keys["rita"], pending["action_id"], "approve", {})
    finally:
        deployment.env.clear()
        deployment.env.update(env)
    assert not outcome["result"].is_error, text(outcome["result"])
    assert outcome["at"] - decided < 15.0, outcome["at"] - decided
    assert json.dumps(calls(upstreams["open"].log, "create_refund")).count("STDIO-1") == 1


@pytest.mark.skipif(not os.environ.get("DATABASE_URL"), reason="scaled mode: needs DATABASE_URL")
def test_stdio_without_redis_in_scaled_mode_says_decisions_will_come_late(deployment, server, keys):
    env = {k: v for k, v in deployment.env.items() if k != "REDIS_URL"}
    started = subprocess.run(
        [sys.executable, "-m", "impri", "mcp", "--gateway", "open"],
        env={**env, "IMPRI_API_KEY": keys["agent"]},
        input="",  # no client: the server ends at once
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "REDIS_URL is not" in started.stderr and "re-read every 2 s" in started.stderr


async def test_an_upstream_away_at_import_is_recorded_by_refresh(
    deployment, server, keys, upstreams
):
    async with gateway_client(server, keys["agent"], "later") as client:
        with pytest.raises(Exception, match="unreachable"):
            await client.list_tools()
        refused = await client.call_tool("get_order", {"order_id": "L-1"})
    assert refused.is_error and "impri gateway refresh later" in text(refused)
    assert "unreachable" in text(refused)
    upstreams["later"].start()
    assert await listed(server, keys["agent"], "later") == {}  # reachable, but nothing recorded
    refreshed = deployment.impri("gateway", "refresh", "later").stdout
    assert "gateway later: recorded 5 tool definition(s)" in refreshed, refreshed
    assert "get_order" in await listed(server, keys["agent"], "later")
    again = deployment.impri("gateway", "refresh", "later").stdout
    assert "no change since the tools were recorded" in again
    async with gateway_client(server, keys["agent"], "later") as client:
        found = await client.call_tool("get_order", {"order_id": "L-1"})
    assert not found.is_error, text(found)
    assert calls(upstreams["later"].log, "get_order") == [
        {"tool": "get_order", "arguments": {"order_id": "L-1"}}
    ]
    pinned = audit_events(server, keys, "gateway.tools_pinned")
    assert [e["data"]["gateway"] for e in pinned if e["data"]["gateway"] == "later"] == ["later"]
