"""MCP messages that read two ways get a JSON-RPC error, over streamable HTTP and over stdio.

A duplicate key (the SDK would keep the last) or nesting past 128 levels (the
message, its params and the tool's arguments around a value of at most 64) is
answered with a JSON-RPC parse error naming the key or the limit, carrying the
request's id; nothing is pushed, and the server keeps serving. A caller without
a key still learns nothing but 401. (The other doors: tests/core/test_json_doors.py.)
"""

from __future__ import annotations

import json
import subprocess

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from tests.agents.test_mcp_e2e import LEGACY_HEADERS, stdio, stdio_params
from tests.factories import REFUND
from tests.live import Deployment

pytestmark = pytest.mark.e2e

CALL = json.dumps(
    {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": "impri_push_action", "arguments": REFUND},
    }
)
DUPLICATE_KIND = CALL.replace('"kind": "payment.refund"', '"kind": "payment.refund", "kind": "x"')
DEEP = CALL.replace('"context": {', '"context": {"deep": ' + "[" * 10_000 + "]" * 10_000 + ", ")


def deep_arguments(levels: int) -> dict:
    value: list = []
    for _ in range(levels - 1):
        value = [value]
    return {**REFUND, "context": {"deep": value}}


@pytest.fixture(scope="module")
def served():
    """A deployment of its own, its server, and an agent's key."""
    deployment = Deployment()
    try:
        server = deployment.start_server()
        yield deployment, server, deployment.last_word("createagent", "support-bot")
    finally:
        deployment.close()


def pushed(served) -> list:
    _, server, key = served
    return server.client(key).get("/actions").json()["items"]


def post(served, text: str, with_key: bool = True):
    _, server, key = served
    headers = {**LEGACY_HEADERS, "Content-Type": "application/json"}
    if with_key:
        headers["Authorization"] = f"Bearer {key}"
    return httpx.post(server.url + "/mcp", content=text, headers=headers, timeout=30)


@pytest.mark.parametrize(
    ("text", "found_id", "words"),
    [
        (DUPLICATE_KIND, 7, 'duplicate key "kind"'),
        (DEEP, 7, "nested deeper than 128 levels"),
        (CALL.replace('"id": 7', '"id": 7, "id": 8'), None, 'duplicate key "id"'),
    ],
)
def test_http_answers_a_message_that_reads_two_ways_with_a_json_rpc_error(
    served, text, found_id, words
):
    response = post(served, text)
    assert response.status_code == 400, response.text
    reply = response.json()
    assert reply["jsonrpc"] == "2.0" and reply["id"] == found_id
    assert reply["error"]["code"] == -32700
    assert words in reply["error"]["message"]
    assert pushed(served) == []


def test_http_without_a_key_is_a_401_whatever_the_body(served):
    for text in (DUPLICATE_KIND, DEEP):
        response = post(served, text, with_key=False)
        assert response.status_code == 401
        assert "duplicate" not in response.text and "nested" not in response.text


async def test_the_official_client_gets_an_error_for_its_call_and_keeps_its_session(served):
    _, server, key = served
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=30)
    transport = streamable_http_client(server.url + "/mcp", http_client=http)
    async with http, Client(transport, mode="legacy") as client:
        with pytest.raises(MCPError, match="nested deeper than 128 levels"):
            await client.call_tool("impri_push_action", deep_arguments(130))
        field = await client.call_tool("impri_push_action", deep_arguments(70))
        assert field.is_error and "context.deep" in field.content[0].text
        assert "nested deeper than 64 levels" in field.content[0].text
    assert pushed(served) == []


async def test_stdio_answers_with_the_calls_id_and_keeps_serving(served):
    deployment, _, key = served
    async with stdio(deployment, key) as client:
        with pytest.raises(MCPError, match="nested deeper than 128 levels"):
            await client.call_tool("impri_push_action", deep_arguments(130))
        assert (await client.list_tools()).tools
    assert pushed(served) == []


def test_stdio_answers_raw_lines_that_read_two_ways(served):
    deployment, _, key = served
    hello = {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    }
    lines = [
        json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello}),
        json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        DUPLICATE_KIND,
        DEEP.replace('"id": 7', '"id": 9'),
        json.dumps({"jsonrpc": "2.0", "id": 10, "method": "tools/list"}),
    ]
    params = stdio_params(deployment, key)
    command = [params.command, *params.args]
    pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "stderr": subprocess.DEVNULL}
    with subprocess.Popen(command, env=params.env, cwd=params.cwd, text=True, **pipes) as process:
        process.stdin.write("".join(line + "\n" for line in lines))
        process.stdin.flush()
        replies = [json.loads(process.stdout.readline()) for _ in range(4)]
        process.stdin.close()  # end of input: the server exits
        assert process.wait(timeout=30) == 0
    by_id = {reply["id"]: reply for reply in replies}
    assert set(by_id) == {1, 7, 9, 10}
    assert 'duplicate key "kind"' in by_id[7]["error"]["message"]
    assert "nested deeper than 128 levels" in by_id[9]["error"]["message"]
    assert by_id[10]["result"]["tools"]
    assert pushed(served) == []
