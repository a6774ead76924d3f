"""`impri mcp` (stdio) signs with the deployment's key and never makes one of its own (issue 40).

It used to generate a key when it found none and publish it into every replica's JWKS.
Now it signs with the key `impri serve` published (given in IMPRI_GRANT_SIGNING_KEY_FILE,
or the one serve generated in the same data directory); without one it refuses to start
with one line naming the setting, and leaves no key behind.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import httpx
import jwt
import pytest

from approvals.grant_pem import new_pem
from tests.factories import refund_body
from tests.live import Deployment

pytestmark = pytest.mark.e2e


@pytest.fixture
def deployment():
    dep = Deployment()
    yield dep
    dep.close()


def stdio_push_and_read(deployment, key: str, action_id: str | None = None, **env: str):
    """Run `impri mcp` for a handful of messages; the replies, the exit code and stderr."""
    calls = [{"name": "impri_push_action", "arguments": refund_body()}]
    if action_id:
        calls = [{"name": "impri_await_decision", "arguments": {"action_id": action_id}}]
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
        *(
            {"jsonrpc": "2.0", "id": 2 + n, "method": "tools/call", "params": call}
            for n, call in enumerate(calls)
        ),
    ]
    process = subprocess.Popen(
        [sys.executable, "-m", "impri", "mcp"],
        env={**deployment.env, "IMPRI_API_KEY": key, **env},
        cwd=deployment.data_dir,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    replies = []
    try:
        process.stdin.write("".join(json.dumps(m) + "\n" for m in messages))
        process.stdin.flush()
        for _ in range(1 + len(calls)):  # an answer to each request, unless it refused to start
            line = process.stdout.readline()
            if not line:
                break
            replies.append(json.loads(line))
        process.stdin.close()  # end of input: the server exits
        process.wait(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    return replies, subprocess.CompletedProcess(
        process.args, process.returncode, process.stdout.read(), process.stderr.read()
    )


def test_without_a_shared_key_impri_mcp_refuses_to_start_naming_the_setting(deployment):
    deployment.impri("migrate")
    key = deployment.last_word("createagent", "support-bot")
    # No serve ever ran with this data directory, and no key file is given. (The system
    # checks of the commands above read a key for the data directory: as if on another host.)
    shutil.rmtree(deployment.data_dir / "grant-keys", ignore_errors=True)
    replies, done = stdio_push_and_read(deployment, key)
    assert done.returncode == 1, done.stderr
    assert replies == [] and done.stdout == ""
    last = done.stderr.strip().splitlines()[-1]
    assert "IMPRI_GRANT_SIGNING_KEY_FILE" in last, done.stderr
    assert "impri mcp signs grants with the key impri serve publishes and has none" in last
    # It made no key of its own on the way.
    assert not (deployment.data_dir / "grant-keys").exists()

    # A key no server published is refused as well: it would be unverifiable everywhere.
    key_file = deployment.data_dir / "stray.pem"
    key_file.write_text(new_pem())
    _, done = stdio_push_and_read(deployment, key, IMPRI_GRANT_SIGNING_KEY_FILE=str(key_file))
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert "is not one impri serve published" in last
    assert "set IMPRI_GRANT_SIGNING_KEY_FILE" in last


def test_impri_mcp_signs_with_the_key_serve_published_and_publishes_none(deployment):
    server = deployment.start_server()
    agent = deployment.last_word("createagent", "support-bot")
    deployment.impri("createreviewer", "rita")
    rita = deployment.last_word("token", "rita")
    published = httpx.get(server.url + "/.well-known/jwks.json", timeout=5).json()["keys"]
    assert len(published) == 1
    with server.client(agent) as client:
        action_id = client.post("/actions", json=refund_body()).json()["action_id"]
    with server.client(rita) as client:
        assert client.post(f"/actions/{action_id}/approve", json={}).status_code == 200
    with server.client(agent) as client:
        rest = client.get(f"/actions/{action_id}/decision?timeout_s=0").json()["grant"]

    replies, done = stdio_push_and_read(deployment, agent, action_id=action_id)
    assert done.returncode == 0, done.stderr
    assert "result" in replies[-1], (replies, done.stderr)
    grant = replies[-1]["result"]["structuredContent"]["grant"]
    assert grant == rest
    assert jwt.get_unverified_header(grant)["kid"] == published[0]["kid"]
    # A push over stdio works, and no second key appeared in the JWKS.
    replies, done = stdio_push_and_read(deployment, agent)
    assert done.returncode == 0, done.stderr
    assert replies[-1]["result"]["structuredContent"]["status"] == "pending"
    assert httpx.get(server.url + "/.well-known/jwks.json", timeout=5).json()["keys"] == published
