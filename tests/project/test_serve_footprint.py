"""`impri serve` loads the MCP SDK with the first MCP request, and the senders' libraries when used.

docs/benchmarks.md, "The scaled stack's idle footprint" (issue 34): the MCP server (the SDK
and its web stack: about 19 MB of a serve process) is mounted by the first request to /mcp
or /mcp/gateway/<name> (``impri.asgi.MountedOnFirstCall``, ``gateway.asgi``), not at import;
segno (the TOTP QR code), webauthn (passkeys) and slack_sdk (the Slack outbox) are imported
by the functions that use them. Each test here fails if one of them is imported eagerly
again. The first MCP calls over streamable HTTP on a fresh server are
``test_serve_footprint_e2e.py``'s.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.project.test_beat import ROOT, clean_env, modules_at_start

# Loaded when an agent calls MCP, an enrolment draws a QR code or a passkey is used.
NOT_AT_SERVE_START = (
    "mcp",
    "mcp_types",
    "starlette",
    "uvicorn",
    "sse_starlette",
    "httpx2",
    "agent_doors.mcp",
    "gateway.proxy",
    "segno",
    "webauthn",
)

# A fresh process imports the ASGI application as daphne does, and the URL configuration as
# serve's checks do, then sends concurrent first requests to /mcp (no key: the SDK's 401).
FIRST_CALLS = """
import asyncio, json, sys
import impri.asgi
from django.urls import get_resolver

get_resolver().url_patterns
at_start = sorted(name for name in %(watched)r if name in sys.modules)

async def post(path):
    sent = []
    body = [{"type": "http.request", "body": b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}'}]

    async def receive():
        if body:
            return body.pop()
        await asyncio.Event().wait()  # no disconnect while the request is answered

    async def send(message):
        sent.append(message)

    scope = {
        "type": "http", "method": "POST", "path": path, "raw_path": path.encode(),
        "query_string": b"", "scheme": "http", "http_version": "1.1",
        "server": ("127.0.0.1", 8000), "client": ("127.0.0.1", 5000),
        "headers": [(b"host", b"127.0.0.1:8000"), (b"content-type", b"application/json"),
                    (b"accept", b"application/json, text/event-stream")],
    }
    await impri.asgi.application(scope, receive, send)
    return sent[0]["status"]

async def main():
    statuses = await asyncio.gather(*(post(p) for p in ["/mcp", "/mcp/"] * 3))
    managers = [t for t in asyncio.all_tasks() if t.get_name() == "impri-mcp-session-manager"]
    from agent_doors.mcp import http
    print(json.dumps({
        "at_start": at_start,
        "statuses": statuses,
        "managers": len(managers),
        "same_app": impri.asgi.mcp_app.app is http.mcp_app,
        "mcp_path": http.MCP_PATH == impri.asgi.MCP_PATH,
    }))
    await http.mcp_app.stop()

asyncio.run(main())
"""


@pytest.mark.e2e  # a process of its own: nothing of this test run's imports
def test_the_mcp_sdk_loads_with_the_first_request_and_one_manager_serves_concurrent_ones(
    tmp_path,
):
    done = subprocess.run(
        [sys.executable, "-c", FIRST_CALLS % {"watched": NOT_AT_SERVE_START}],
        env=clean_env(IMPRI_DATA_DIR=str(tmp_path / "data"), IMPRI_PROCESS_ROLE="serve"),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert answer["at_start"] == []
    assert answer["statuses"] == [401] * 6  # the SDK's auth answered: its app ran
    assert answer["managers"] == 1
    assert answer["same_app"] and answer["mcp_path"]


@pytest.mark.e2e  # a process of its own: the console script's path to daphne
def test_serve_starts_without_the_mcp_sdk_the_qr_code_or_webauthn(tmp_path):
    done, loaded = modules_at_start(
        tmp_path,
        "daphne.server:Server.run",
        "serve",
        IMPRI_DATA_DIR=str(tmp_path / "data"),
    )
    # It stopped where daphne would listen: the application and the URL configuration loaded.
    assert {"impri.asgi", "impri.urls", "gateway.asgi", "twofactor.passkeys"} <= loaded
    assert [name for name in NOT_AT_SERVE_START if name in loaded] == []


@pytest.mark.e2e  # a process of its own: the console script's path to Celery's worker
def test_an_idle_worker_loads_no_slack_sdk(tmp_path):
    done, loaded = modules_at_start(
        tmp_path,
        "celery.worker:WorkController.start",
        "worker",
        IMPRI_DATA_DIR=str(tmp_path / "data"),
        REDIS_URL="redis://127.0.0.1:1/0",
    )
    assert "slackapp.delivery" in loaded
    assert [name for name in ("slack_sdk", "slackapp.blocks", "segno") if name in loaded] == []
