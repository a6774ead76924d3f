"""The first MCP calls on a fresh `impri serve`, concurrent, over streamable HTTP.

The server mounts the MCP SDK with its first request to /mcp (``impri.asgi``'s
``MountedOnFirstCall``, ``test_serve_footprint.py``): calls that arrive together before it
is loaded all get their answers, from one session manager.
"""

from __future__ import annotations

import asyncio

import pytest

from tests.agents.test_mcp_e2e import TOOLS, mcp_client
from tests.live import Deployment

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def deployment():
    dep = Deployment()
    yield dep
    dep.close()


@pytest.mark.parametrize("mode", ["legacy", "auto"], ids=["handshake", "auto"])
async def test_concurrent_first_calls_on_a_fresh_server_are_all_answered(deployment, mode):
    server = deployment.start_server()
    key = deployment.last_word("createagent", f"first-{mode}")

    async def list_tools(path: str) -> set[str]:
        async with mcp_client(server, key, mode, path=path) as client:
            return {tool.name for tool in (await client.list_tools()).tools}

    answers = await asyncio.gather(*(list_tools(p) for p in ["/mcp", "/mcp/"] * 3))
    assert answers == [TOOLS] * 6
