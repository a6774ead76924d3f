"""The server's event loop (impri/eventloop.py): uvloop by default, asyncio's on request.

The rest of the end-to-end suite runs on the default (uvloop); here the same
seed flow and shutdown run on both loops, and a bad IMPRI_EVENT_LOOP is one
line, not a traceback.
"""

from __future__ import annotations

import asyncio
import signal
import time

import pytest

from impri import eventloop
from tests.agents.test_e2e_rest import Waiter
from tests.factories import refund_body
from tests.live import Deployment
from tests.project.test_cli import impri
from tests.waits import until_server_waits


@pytest.fixture
def default_policy():
    """``choose`` sets the process's loop policy: put asyncio's back afterwards."""
    yield
    asyncio.set_event_loop_policy(None)


@pytest.mark.parametrize("command", ["worker", "beat", "mcp", "migrate", None])
def test_only_the_server_changes_its_loop(monkeypatch, default_policy, command):
    monkeypatch.setenv("IMPRI_EVENT_LOOP", "uvloop")
    assert eventloop.choose(command) == "asyncio"
    assert type(asyncio.get_event_loop_policy()) is asyncio.DefaultEventLoopPolicy


@pytest.mark.parametrize(("value", "expected"), [(None, "uvloop"), ("asyncio", "asyncio")])
def test_the_server_runs_on_uvloop_unless_asked_for_asyncio(
    monkeypatch, default_policy, value, expected
):
    if value is None:
        monkeypatch.delenv("IMPRI_EVENT_LOOP", raising=False)
    else:
        monkeypatch.setenv("IMPRI_EVENT_LOOP", value)
    assert eventloop.choose("serve") == expected
    loop = asyncio.new_event_loop()
    try:
        assert eventloop.name_of(loop) == expected
    finally:
        loop.close()


@pytest.mark.parametrize("value", ["trio", "1", "uv loop"])
def test_an_unknown_loop_names_the_variable(monkeypatch, default_policy, value):
    monkeypatch.setenv("IMPRI_EVENT_LOOP", value)
    with pytest.raises(eventloop.Unavailable, match="IMPRI_EVENT_LOOP must be one of"):
        eventloop.choose("serve")


@pytest.mark.e2e
def test_a_bad_loop_is_one_line_not_a_traceback(tmp_path):
    done = impri("check", cwd=tmp_path, IMPRI_DATA_DIR=str(tmp_path), IMPRI_EVENT_LOOP="trio")
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "impri: IMPRI_EVENT_LOOP must be one of auto, uvloop, asyncio, not 'trio'"
    )


@pytest.mark.e2e
@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
def test_the_seed_flow_and_shutdown_on_each_loop(loop):
    # A long re-read interval: a waiter that returns early was woken by the channel layer.
    deployment = Deployment(IMPRI_AWAIT_REREAD_S="30")
    try:
        server = deployment.start_server(IMPRI_EVENT_LOOP=loop)
        assert f"; event loop {loop}\n" in server.output()
        agent, rita = deployment.agent_and_reviewer()

        pushed = server.client(agent).post("/actions", json=refund_body())
        assert pushed.status_code == 201, pushed.text
        action_id = pushed.json()["action_id"]
        woken = Waiter(server, agent, action_id, timeout_s=20)
        woken.start()
        until_server_waits(server)
        approved = server.client(rita).post(f"/actions/{action_id}/approve", json={})
        assert approved.status_code == 200, approved.text
        woken.join(timeout=25)
        assert woken.response.status_code == 200
        assert woken.response.json()["status"] == "approved"
        assert woken.elapsed < 15, "woken by the re-read, not by the channel layer"

        # SIGTERM with a long-poll open: it answers pending and the process exits promptly.
        second = server.client(agent).post(
            "/actions", json=refund_body(title="Refund $84.00 on order 10433")
        )
        assert second.status_code == 201, second.text
        open_wait = Waiter(server, agent, second.json()["action_id"], timeout_s=60)
        open_wait.start()
        until_server_waits(server)
        started = time.monotonic()
        server.process.send_signal(signal.SIGTERM)
        server.process.wait(timeout=15)
        open_wait.join(timeout=15)
        assert time.monotonic() - started < 5
        assert server.process.returncode == 0, server.output()
        assert open_wait.response.status_code == 200
        assert open_wait.response.json()["status"] == "pending"
    finally:
        deployment.close()
