"""/mcp over HTTP: stateless, so a standalone GET stream is refused; every error is JSON."""

from __future__ import annotations

from contextlib import asynccontextmanager

import httpx
import pytest

from agent_doors.mcp import build_server
from agent_doors.mcp.http import AgentKeyVerifier, MCPHttpApp

pytestmark = pytest.mark.django_db(transaction=True)

HEADERS = {"Accept": "application/json, text/event-stream", "Mcp-Protocol-Version": "2025-06-18"}
LIST_TOOLS = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}


@asynccontextmanager
async def http_app():
    app = MCPHttpApp(build_server(verifier=AgentKeyVerifier()))
    transport = httpx.ASGITransport(app=app)
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8000") as http:
            yield http
    finally:
        await app.stop()


@pytest.mark.parametrize("method", ["GET", "DELETE", "PUT"])
async def test_a_standalone_stream_or_session_end_is_405_with_an_agent_key(agent, method):
    async with http_app() as http:
        headers = {**HEADERS, "Authorization": f"Bearer {agent.key}", "Accept": "text/event-stream"}
        response = await http.request(method, "/mcp", headers=headers)
    assert response.status_code == 405
    assert response.headers["allow"] == "POST"
    assert response.json()["code"] == "method"


async def test_tool_calls_still_stream_after_a_refused_get(agent):
    async with http_app() as http:
        headers = {**HEADERS, "Authorization": f"Bearer {agent.key}"}
        assert (await http.get("/mcp", headers=headers)).status_code == 405
        response = await http.post("/mcp", json=LIST_TOOLS, headers=headers)
    assert response.status_code == 200
    assert "impri_push_action" in response.text


@pytest.mark.parametrize(
    ("headers", "body", "status"),
    [
        ({}, LIST_TOOLS, 401),
        ({"Authorization": "Bearer nope"}, LIST_TOOLS, 401),
        ({"Accept": "text/html"}, LIST_TOOLS, 406),
        ({"Content-Type": "text/plain"}, "hello", 400),
        ({"Host": "evil.example"}, LIST_TOOLS, 421),
        ({}, "{not json", 400),
    ],
)
async def test_every_refusal_on_mcp_is_json(agent, headers, body, status):
    auth = {} if status == 401 else {"Authorization": f"Bearer {agent.key}"}
    kwargs = {"json": body} if isinstance(body, dict) else {"content": body}
    merged = {**HEADERS, "Content-Type": "application/json", **auth, **headers}
    async with http_app() as http:
        response = await http.post("/mcp", headers=merged, **kwargs)
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json"), response.headers
    response.json()
