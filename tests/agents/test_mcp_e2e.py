"""MCP against real servers: daphne over streamable HTTP, and `impri mcp` over stdio.

The HTTP tests run with both protocol eras the SDK client speaks: the
initialize handshake (what desktop hosts speak today) and whatever `auto`
negotiates with this server (the 2026 stateless protocol).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from contextlib import asynccontextmanager

import anyio
import httpx
import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from tests.conftest import SCALED
from tests.contract import SEED_DETAIL, check_grant, check_reported, check_seed_decision
from tests.factories import REFUND, refund_body
from tests.live import Deployment
from tests.waits import server_waiters, until_server_idle, until_server_waits

pytestmark = pytest.mark.e2e

TOOLS = {
    "impri_push_action",
    "impri_await_decision",
    "impri_report_result",
    "impri_get_action",
    "impri_cancel_action",
}
LEGACY_HEADERS = {
    "Accept": "application/json, text/event-stream",
    "Mcp-Protocol-Version": "2025-06-18",
}


@pytest.fixture(scope="module")
def deployment():
    # A long re-read interval: a waiter that returns early was woken by the channel layer.
    dep = Deployment(IMPRI_AWAIT_REREAD_S="30")
    yield dep
    dep.close()


@pytest.fixture(scope="module")
def server(deployment):
    return deployment.start_server()


@pytest.fixture(scope="module")
def short_server(deployment, server):
    """A second daphne on the same database whose MCP waits are short: cap 2 s, progress every 0.5 s."""
    return deployment.start_server(IMPRI_MCP_AWAIT_CAP_S="2", IMPRI_MCP_PROGRESS_EVERY_S="0.5")


@pytest.fixture(scope="module")
def keys(deployment, server):
    agent_key, rita = deployment.agent_and_reviewer()
    return {"agent": agent_key, "rita": rita}


@pytest.fixture(params=["legacy", "auto"], ids=["handshake", "auto"])
def mode(request) -> str:
    return request.param


@asynccontextmanager
async def mcp_client(server, key: str, mode: str = "legacy", path: str = "/mcp"):
    http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {key}"}, timeout=httpx2.Timeout(30, read=300)
    )
    async with (
        http,
        Client(streamable_http_client(server.url + path, http_client=http), mode=mode) as client,
    ):
        yield client


async def push(client, **overrides) -> dict:
    result = await client.call_tool("impri_push_action", refund_body(**overrides))
    assert not result.is_error, result.content
    return result.structured_content


def audit_trail(server, keys, action_id: str) -> list[str]:
    audit = server.client(keys["rita"]).get("/audit", params={"action_id": action_id}).json()
    return [event["event"] for event in audit["items"]]


def listening(server, action_id: str) -> int:
    """Hubs still in the action's group on the deployment's Redis (scaled leg only): the
    subscribers of channels_redis's pub/sub channel ``<prefix>asgi__group__<group>``."""
    import redis

    client = redis.Redis.from_url(os.environ["REDIS_URL"])
    [(_, count)] = client.pubsub_numsub(
        f"{server.deployment.redis_prefix}asgi__group__action.{action_id}"
    )
    return count


def wait_until_nobody_listens(server, action_id: str, timeout_s: float = 5) -> int:
    deadline = time.monotonic() + timeout_s
    while (members := listening(server, action_id)) and time.monotonic() < deadline:
        time.sleep(0.1)  # another process's state: nothing to await
    return members


# --- Streamable HTTP ---------------------------------------------------------------------


async def test_tools_are_listed_with_their_schemas(server, keys, mode):
    async with mcp_client(server, keys["agent"], mode) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert set(tools) == TOOLS
    assert set(tools["impri_push_action"].input_schema["required"]) == {
        "kind",
        "title",
        "preview",
        "payload",
    }
    preview = tools["impri_push_action"].input_schema["$defs"]["PreviewIn"]
    assert preview["properties"]["format"]["enum"] == ["plain", "markdown", "diff", "json"]
    decision = tools["impri_await_decision"].output_schema
    assert {"action_id", "status", "payload", "preview", "edited_by_human"} <= set(
        decision["required"]
    )
    assert tools["impri_await_decision"].annotations.read_only_hint is True
    assert tools["impri_cancel_action"].annotations.destructive_hint is True
    for tool in tools.values():
        assert tool.output_schema["type"] == "object", tool.name


async def test_the_trailing_slash_path_serves_mcp_too(server, keys):
    async with mcp_client(server, keys["agent"], path="/mcp/") as client:
        assert {tool.name for tool in (await client.list_tools()).tools} == TOOLS


async def test_the_seeds_refund_call(server, keys, mode):
    async with mcp_client(server, keys["agent"], mode) as client:
        result = await client.call_tool("impri_push_action", REFUND)
    assert not result.is_error, result.content
    pushed = result.structured_content
    assert pushed["status"] == "pending"
    assert type(pushed["created_at"]) is int
    assert pushed["inbox_url"] == f"{server.url}/inbox/actions/{pushed['action_id']}"
    # The same action over REST: one service layer behind both adapters.
    action = server.client(keys["agent"]).get(f"/actions/{pushed['action_id']}").json()
    assert action["agent"] == "support-bot"
    assert action["payload"] == REFUND["payload"]
    assert action["context"] == REFUND["context"]
    assert action["editable"] == ["payload.amount_cents"]


async def test_a_waiter_is_woken_by_an_edit_and_approve_over_rest(server, keys, mode):
    async with mcp_client(server, keys["agent"], mode) as client:
        action_id = (await push(client))["action_id"]
        outcome = {}

        async def wait():
            # No progress token and timeout 20 s, re-read every 30 s: only the channel
            # layer can end this wait early.
            result = await client.call_tool(
                "impri_await_decision", {"action_id": action_id, "timeout_s": 20}
            )
            outcome["result"], outcome["at"] = result, time.monotonic()

        before = await anyio.to_thread.run_sync(server_waiters, server)
        async with anyio.create_task_group() as tg:
            tg.start_soon(wait)
            # Decide only once the server holds the wait: the test is about the wake.
            await anyio.to_thread.run_sync(until_server_waits, server, before + 1)
            assert not outcome
            approved = await anyio.to_thread.run_sync(
                lambda: server.client(keys["rita"]).post(
                    f"/actions/{action_id}/approve",
                    json={
                        "edits": {"payload.amount_cents": 5000},
                        "note": "half: the box was fine",
                    },
                )
            )
            decided_at = time.monotonic()
            assert approved.status_code == 200, approved.text

        assert outcome["at"] - decided_at < 1.0
        decision = outcome["result"].structured_content
        assert decision["status"] == "approved"
        assert decision["payload"]["amount_cents"] == 5000
        assert decision["edited_by_human"] is True
        assert decision["decided_by"] == {"type": "reviewer", "name": "rita"}
        assert decision["note"] == "half: the box was fine"
        assert decision["preview"]["format"] == "diff"
        assert '-  "amount_cents": 8400' in decision["preview"]["body"]
        assert '+  "amount_cents": 5000' in decision["preview"]["body"]

        reported = await client.call_tool(
            "impri_report_result",
            {
                "action_id": action_id,
                "status": "executed",
                "detail": {"transaction_id": "re_3PqK9L2e"},
            },
        )
        out = reported.structured_content
        assert (out["action_id"], out["status"]) == (action_id, "executed")
        assert out["result"]["status"] == "executed"
        final = (
            await client.call_tool("impri_get_action", {"action_id": action_id})
        ).structured_content
    assert final["status"] == "executed"
    assert final["result"]["detail"] == {"transaction_id": "re_3PqK9L2e"}
    assert final["payload"]["amount_cents"] == 5000
    assert final["original_payload"]["amount_cents"] == 8400


async def test_errors_are_tool_errors_naming_the_problem(server, keys, mode):
    async with mcp_client(server, keys["agent"], mode) as client:
        invalid = await client.call_tool("impri_push_action", refund_body(kind="Refund!"))
        missing = await client.call_tool("impri_get_action", {"action_id": "act_missing"})
    assert invalid.is_error
    assert invalid.content[0].text.startswith("Invalid input: kind: ")
    assert invalid.meta["impri/error"]["status"] == 422
    assert missing.is_error
    assert missing.content[0].text == "Not found: no action 'act_missing' is visible to you"
    assert missing.meta["impri/error"]["status"] == 404


@pytest.mark.parametrize("who", ["nobody", "unknown key", "reviewer token"])
def test_only_an_agent_key_gets_in(server, keys, who):
    headers = dict(LEGACY_HEADERS)
    if who != "nobody":
        token = keys["rita"] if who == "reviewer token" else "imp_a_" + "x" * 40
        headers["Authorization"] = f"Bearer {token}"
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    response = httpx.post(server.url + "/mcp", json=body, headers=headers)
    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith("Bearer ")
    assert "impri_push_action" not in response.text


def test_a_foreign_host_header_is_refused(server, keys):
    # DNS rebinding protection, derived from ALLOWED_HOSTS (localhost, 127.0.0.1, [::1]).
    headers = {**LEGACY_HEADERS, "Authorization": f"Bearer {keys['agent']}", "Host": "evil.example"}
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    assert httpx.post(server.url + "/mcp", json=body, headers=headers).status_code == 421


def test_a_chunked_oversized_body_is_refused_with_413(server, keys):
    def chunks():
        yield b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"blob": "'
        for _ in range(40):
            yield b"x" * 32768
        yield b'"}}'

    headers = {
        **LEGACY_HEADERS,
        "Authorization": f"Bearer {keys['agent']}",
        "Content-Type": "application/json",
    }
    response = httpx.post(server.url + "/mcp", content=chunks(), headers=headers)
    assert response.status_code == 413
    assert "IMPRI_MAX_BODY_BYTES" in response.json()["detail"]


# --- Waits that survive real clients ------------------------------------------------------------


async def test_a_wait_with_a_progress_token_gets_progress_notifications(short_server, keys, mode):
    updates = []

    async def on_progress(progress, total, message):
        updates.append((progress, total, message))

    async with mcp_client(short_server, keys["agent"], mode) as client:
        action_id = (await push(client))["action_id"]
        started = time.monotonic()
        result = await client.call_tool(
            "impri_await_decision",
            {"action_id": action_id, "timeout_s": 3},
            progress_callback=on_progress,
        )
    assert result.structured_content["status"] == "pending"
    assert time.monotonic() - started >= 3  # the 2 s cap is for calls without a token
    assert len(updates) >= 3
    assert all(total == 3 for _, total, _ in updates)
    assert all(
        message.startswith("waiting for a reviewer in reviewers, ") for _, _, message in updates
    )
    assert [p for p, _, _ in updates] == sorted(p for p, _, _ in updates)


async def test_a_wait_without_a_progress_token_returns_pending_by_its_cap(short_server, keys, mode):
    async with mcp_client(short_server, keys["agent"], mode) as client:
        action_id = (await push(client))["action_id"]
        started = time.monotonic()
        result = await client.call_tool(
            "impri_await_decision", {"action_id": action_id, "timeout_s": 30}
        )
    assert not result.is_error
    assert result.structured_content["status"] == "pending"
    assert 1.5 < time.monotonic() - started < 10


async def test_an_abandoned_wait_leaves_the_action_pending(server, keys, mode):
    async with mcp_client(server, keys["agent"], mode) as client:
        action_id = (await push(client))["action_id"]
    trail = audit_trail(server, keys, action_id)

    async def wait_then_hang_up():
        async with mcp_client(server, keys["agent"], mode) as client:
            await client.call_tool(
                "impri_await_decision", {"action_id": action_id, "timeout_s": 20}
            )

    before = await anyio.to_thread.run_sync(server_waiters, server)
    async with anyio.create_task_group() as tg:
        tg.start_soon(wait_then_hang_up)
        await anyio.to_thread.run_sync(until_server_waits, server, before + 1)
        tg.cancel_scope.cancel()  # the agent gives up and goes away mid-wait

    # The server lets go of the wait (its gauge falls back), on either leg...
    await anyio.to_thread.run_sync(until_server_idle, server, before)
    if SCALED:  # ...and of the action's group on the shared Redis.
        assert wait_until_nobody_listens(server, action_id) == 0, (
            "the server kept waiting after the hang-up"
        )
    rest = server.client(keys["agent"])
    assert rest.get(f"/actions/{action_id}").json()["status"] == "pending"
    assert audit_trail(server, keys, action_id) == trail  # the wait left no trace
    # Untouched means still decidable, and a new wait sees the decision.
    server.client(keys["rita"]).post(f"/actions/{action_id}/reject", json={"note": "duplicate"})
    async with mcp_client(server, keys["agent"], mode) as client:
        result = await client.call_tool(
            "impri_await_decision", {"action_id": action_id, "timeout_s": 5}
        )
    assert result.structured_content["status"] == "rejected"


async def test_sigterm_answers_open_waits_pending_and_daphne_exits(deployment, server, keys):
    """Under load (an MCP wait and 40 REST long-polls open), every wait is answered before exit.

    Deterministic: the server stops once no wait is open and every HTTP request has sent its
    answer (impri/shutdown.py counts them), not after a fixed pause that a loaded machine
    could overrun; the bound on the exit is generous for the same reason.
    """
    doomed = deployment.start_server()
    async with mcp_client(doomed, keys["agent"]) as client:
        action_id = (await push(client))["action_id"]
    answers, failures, polled = [], [], []

    async def wait():
        try:
            async with mcp_client(doomed, keys["agent"]) as client:

                async def on_progress(*_):
                    pass

                answers.append(
                    await client.call_tool(
                        "impri_await_decision",
                        {"action_id": action_id, "timeout_s": 60},
                        progress_callback=on_progress,
                    )
                )
        except Exception as exc:
            failures.append(exc)

    async def long_poll(http):
        try:
            response = await http.get(f"/actions/{action_id}/decision", params={"timeout_s": 60})
            polled.append(response.json()["status"])
        except Exception as exc:
            failures.append(exc)

    headers = {"Authorization": f"Bearer {keys['agent']}"}
    async with (
        httpx.AsyncClient(base_url=doomed.url + "/api/v1", headers=headers, timeout=30) as http,
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(wait)
        for _ in range(40):
            tg.start_soon(long_poll, http)
        await anyio.to_thread.run_sync(until_server_waits, doomed, 41)  # all open
        started = time.monotonic()
        doomed.process.terminate()
        returncode = await anyio.to_thread.run_sync(doomed.process.wait, 20)
        stopped_in = time.monotonic() - started
    assert returncode == 0, doomed.output()
    assert stopped_in < 5
    # Every open wait was answered, not cut: a normal result that says pending (call again).
    assert not failures, failures
    assert answers and not answers[0].is_error
    assert answers[0].structured_content["status"] == "pending"
    assert polled == ["pending"] * 40
    assert "still open" not in doomed.output()
    if SCALED:
        assert wait_until_nobody_listens(doomed, action_id) == 0
    assert server.client(keys["agent"]).get(f"/actions/{action_id}").json()["status"] == "pending"


# --- stdio ----------------------------------------------------------------------------------


def stdio_params(deployment, key: str, **env: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "impri", "mcp"],
        env={**deployment.env, "IMPRI_API_KEY": key, **env},
        cwd=str(deployment.data_dir),
    )


@asynccontextmanager
async def stdio(deployment, key: str, **env: str):
    with open(deployment.data_dir / "stdio.log", "a") as errlog:
        transport = stdio_client(stdio_params(deployment, key, **env), errlog=errlog)
        async with Client(transport) as client:
            yield client


async def test_stdio_pushes_and_reads_an_action(deployment, server, keys):
    async with stdio(deployment, keys["agent"]) as client:
        assert {tool.name for tool in (await client.list_tools()).tools} == TOOLS
        pushed = await push(client, idempotency_key="stdio-10432")
        read = (
            await client.call_tool("impri_get_action", {"action_id": pushed["action_id"]})
        ).structured_content
    assert pushed["status"] == "pending"
    assert read["payload"] == REFUND["payload"]
    assert read["idempotency_key"] == "stdio-10432"
    # One database: the HTTP server sees what the stdio process pushed.
    over_rest = server.client(keys["agent"]).get(f"/actions/{pushed['action_id']}").json()
    assert over_rest["agent"] == "support-bot"


async def test_a_decision_over_http_reaches_the_stdio_waiter(deployment, server, keys):
    # With Redis the message crosses processes, so the re-read can be slow (30 s); with the
    # in-memory layer only the re-read (every 1 s here) can find the decision.
    reread = "30" if SCALED else "1"
    # The stdio process has no /metrics: its first progress notification, sent from the
    # wait loop after the first read, shows the wait is open.
    async with stdio(
        deployment, keys["agent"], IMPRI_AWAIT_REREAD_S=reread, IMPRI_MCP_PROGRESS_EVERY_S="0.2"
    ) as client:
        action_id = (await push(client))["action_id"]
        outcome = {}
        waiting = anyio.Event()

        async def on_progress(*_):
            waiting.set()

        async def wait():
            started = time.monotonic()
            result = await client.call_tool(
                "impri_await_decision",
                {"action_id": action_id, "timeout_s": 20},
                progress_callback=on_progress,
            )
            outcome["result"], outcome["elapsed"] = result, time.monotonic() - started

        async with anyio.create_task_group() as tg:
            tg.start_soon(wait)
            with anyio.fail_after(30):
                await waiting.wait()
            assert not outcome
            response = await anyio.to_thread.run_sync(
                lambda: server.client(keys["rita"]).post(
                    f"/actions/{action_id}/approve", json={"edits": {"payload.amount_cents": 4200}}
                )
            )
            assert response.status_code == 200, response.text

    decision = outcome["result"].structured_content
    assert decision["status"] == "approved"
    assert decision["payload"]["amount_cents"] == 4200
    assert decision["edited_by_human"] is True
    assert outcome["elapsed"] < 10, (
        "the stdio waiter ran to its timeout instead of seeing the decision"
    )


@pytest.mark.parametrize("transport", ["http", "stdio"])
async def test_the_seeds_three_calls_verbatim(deployment, server, keys, transport):
    """push, await, report exactly as the seed writes them; the same shapes as REST."""
    session = (
        mcp_client(server, keys["agent"])
        if transport == "http"
        else stdio(deployment, keys["agent"])
    )
    async with session as client:
        pushed = (await client.call_tool("impri_push_action", REFUND)).structured_content
        action_id = pushed["action_id"]
        over_rest = server.client(keys["agent"]).get(f"/actions/{action_id}").json()
        assert pushed.keys() == over_rest.keys()
        approve = server.client(keys["rita"]).post(f"/actions/{action_id}/approve", json={})
        assert approve.status_code == 200, approve.text
        decision = (
            await client.call_tool("impri_await_decision", {"action_id": action_id})
        ).structured_content
        check_seed_decision(decision, action_id, REFUND["payload"])
        jwks = httpx.get(server.url + "/.well-known/jwks.json").json()
        check_grant(decision["grant"], jwks, action_id, decision["payload_sha256"])
        rest_decision = server.client(keys["agent"]).get(f"/actions/{action_id}/decision").json()
        assert rest_decision == decision
        report = await client.call_tool(
            "impri_report_result",
            {"action_id": action_id, "status": "executed", "detail": SEED_DETAIL},
        )
    assert not report.is_error, report.content
    check_reported(report.structured_content, action_id)
    over_rest = server.client(keys["agent"]).get(f"/actions/{action_id}").json()
    if (
        transport == "stdio"
    ):  # stdio has no request to take a host from: IMPRI_BASE_URL or its default
        over_rest.pop("inbox_url"), report.structured_content.pop("inbox_url")
    assert report.structured_content == over_rest


def test_stdio_writes_nothing_but_protocol_to_stdout(deployment, server, keys):
    messages = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "test", "version": "1"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        {
            "jsonrpc": "2.0",
            "id": 3,
            "method": "tools/call",
            "params": {"name": "impri_push_action", "arguments": REFUND},
        },
    ]
    stderr_path = deployment.data_dir / "stdio-raw.log"
    with open(stderr_path, "w") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "impri", "mcp"],
            env={**deployment.env, "IMPRI_API_KEY": keys["agent"]},
            cwd=deployment.data_dir,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
        try:
            process.stdin.write("".join(json.dumps(m) + "\n" for m in messages))
            process.stdin.flush()
            replies = [json.loads(process.stdout.readline()) for _ in range(3)]
            process.stdin.close()  # end of input: the server exits
            assert process.wait(timeout=30) == 0
            rest = process.stdout.read()
        finally:
            if process.poll() is None:
                process.kill()
    assert rest == ""
    assert [reply["id"] for reply in replies] == [1, 2, 3]
    assert all(reply["jsonrpc"] == "2.0" for reply in replies)
    assert replies[2]["result"]["structuredContent"]["status"] == "pending"
    assert "serving agent support-bot" in stderr_path.read_text()


@pytest.mark.parametrize(
    ("key", "message"),
    [
        (None, "IMPRI_API_KEY is not set"),
        ("imp_a_" + "x" * 40, "IMPRI_API_KEY is not a valid agent key"),
        ("rita", "IMPRI_API_KEY is a reviewer token"),
    ],
)
def test_stdio_refuses_to_start_without_an_agent_key(deployment, server, keys, key, message):
    env = {"IMPRI_API_KEY": keys.get(key, key)} if key else {}
    done = deployment.impri("mcp", check=False, **env)
    assert done.returncode != 0
    assert message in done.stderr
    assert done.stdout == ""
