"""The seed's refund flow over HTTP against real daphne servers."""

from __future__ import annotations

import threading
import time

import pytest

from tests.conftest import SCALED
from tests.factories import refund_body
from tests.live import Deployment
from tests.waits import until_server_waits

pytestmark = pytest.mark.e2e


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
def keys(deployment, server):
    agent_key, rita = deployment.agent_and_reviewer()
    return {"agent": agent_key, "rita": rita}


class Waiter(threading.Thread):
    """An agent blocked on GET /decision in a thread of its own."""

    def __init__(self, server, key: str, action_id: str, timeout_s: int):
        super().__init__(daemon=True)
        self.client = server.client(key, timeout=timeout_s + 30)
        self.path = f"/actions/{action_id}/decision"
        self.timeout_s = timeout_s
        self.response = None
        self.elapsed = None

    def run(self):
        started = time.monotonic()
        self.response = self.client.get(self.path, params={"timeout_s": self.timeout_s})
        self.elapsed = time.monotonic() - started


def push(server, key: str, **overrides) -> dict:
    response = server.client(key).post("/actions", json=refund_body(**overrides))
    assert response.status_code == 201, response.text
    return response.json()


def test_seed_refund_flow_end_to_end(server, keys):
    action = push(server, keys["agent"])
    assert action["status"] == "pending"
    assert action["inbox_url"] == f"{server.url}/inbox/actions/{action['action_id']}"

    waiter = Waiter(server, keys["agent"], action["action_id"], timeout_s=20)
    waiter.start()
    until_server_waits(server)  # the test is about being woken, not about the first read
    assert waiter.is_alive()

    approved = server.client(keys["rita"]).post(
        f"/actions/{action['action_id']}/approve",
        json={"edits": {"payload.amount_cents": 5000}, "note": "half: the box was fine"},
    )
    assert approved.status_code == 200, approved.text
    waiter.join(timeout=25)

    assert waiter.response.status_code == 200
    decision = waiter.response.json()
    # The re-read interval is 30 s and the timeout 20 s: only the channel layer can have woken it.
    assert decision["status"] == "approved"
    assert decision["payload"]["amount_cents"] == 5000
    assert decision["edited_by_human"] is True
    assert decision["preview"]["format"] == "diff"
    assert '-  "amount_cents": 8400' in decision["preview"]["body"]
    assert '+  "amount_cents": 5000' in decision["preview"]["body"]
    assert decision["decided_by"] == {"type": "reviewer", "name": "rita"}

    reported = server.client(keys["agent"]).post(
        f"/actions/{action['action_id']}/result",
        json={"status": "executed", "detail": {"transaction_id": "re_3PqK9L2e"}},
    )
    assert reported.status_code == 200, reported.text
    final = server.client(keys["agent"]).get(f"/actions/{action['action_id']}").json()
    assert final["status"] == "executed"
    assert final["result"]["detail"] == {"transaction_id": "re_3PqK9L2e"}
    assert final["payload"]["amount_cents"] == 5000
    assert final["original_payload"]["amount_cents"] == 8400

    # The paper trail: who proposed, which rule routed, who approved what, which transaction ran it.
    rita = server.client(keys["rita"])
    trail = rita.get("/audit", params={"action_id": action["action_id"]}).json()["items"]
    assert [(e["event"], e["actor_id"]) for e in trail] == [
        ("action.pushed", "support-bot"),
        ("rule.matched", "(default)"),
        ("action.edited", "rita"),
        ("action.approved", "rita"),
        ("result.reported", "support-bot"),
    ]
    assert trail[2]["data"]["changes"] == {"payload.amount_cents": {"before": 8400, "after": 5000}}
    assert trail[4]["data"]["detail"] == {"transaction_id": "re_3PqK9L2e"}
    assert trail[4]["data"]["approved_payload_sha256"] == trail[3]["data"]["payload_sha256"]
    assert rita.get("/audit/verify").json()["ok"] is True


def test_waiter_gets_pending_when_nobody_decides(server, keys):
    action = push(server, keys["agent"])
    response = server.client(keys["agent"]).get(
        f"/actions/{action['action_id']}/decision", params={"timeout_s": 1}
    )
    assert response.status_code == 200
    assert response.json()["status"] == "pending"


def test_waiter_wakes_on_rejection(server, keys):
    action = push(server, keys["agent"])
    waiter = Waiter(server, keys["agent"], action["action_id"], timeout_s=20)
    waiter.start()
    until_server_waits(server)
    assert waiter.is_alive()
    server.client(keys["rita"]).post(
        f"/actions/{action['action_id']}/reject", json={"note": "not our fault"}
    )
    waiter.join(timeout=25)
    assert waiter.response.json()["status"] == "rejected"
    assert waiter.response.json()["note"] == "not our fault"


def test_oversized_body_is_refused_with_413(server, keys):
    body = refund_body(context={"blob": "x" * (1024 * 1024 + 10)})
    response = server.client(keys["agent"]).post("/actions", json=body)
    assert response.status_code == 413
    assert "IMPRI_MAX_BODY_BYTES" in response.json()["detail"]


def test_chunked_oversized_body_is_refused_with_413(server, keys):
    def chunks():
        yield b'{"kind": "payment.refund", "context": {"blob": "'
        for _ in range(40):
            yield b"x" * 32768
        yield b'"}}'

    response = server.client(keys["agent"]).post(
        "/actions", content=chunks(), headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 413


def test_health_and_readiness_need_no_key(server):
    import httpx

    assert httpx.get(server.url + "/healthz").json() == {"status": "ok"}
    ready = httpx.get(server.url + "/readyz")
    assert ready.status_code == 200
    assert ready.json()["checks"] == {"database": "ok", "channel_layer": "ok", "audit_log": "ok"}


def test_openapi_lists_every_endpoint(server):
    import httpx

    spec = httpx.get(server.url + "/api/v1/openapi.json").json()
    paths = spec["paths"]
    for path in (
        "/api/v1/actions",
        "/api/v1/actions/{action_id}",
        "/api/v1/actions/{action_id}/decision",
        "/api/v1/actions/{action_id}/result",
        "/api/v1/actions/{action_id}/cancel",
        "/api/v1/actions/{action_id}/approve",
        "/api/v1/actions/{action_id}/reject",
        "/api/v1/audit",
        "/api/v1/audit/verify",
    ):
        assert path in paths, path


@pytest.fixture(scope="module")
def pair():
    """Two daphne processes sharing one deployment, like servers behind a proxy."""
    # With Redis the message crosses processes, so the re-read can be slow (30 s)
    # and the waiter must still return at once. With the in-memory layer it can't:
    # only the re-read (every 1 s here) finds the decision.
    dep = Deployment(IMPRI_AWAIT_REREAD_S="30" if SCALED else "1")
    first = dep.start_server()
    second = dep.start_server()
    agent_key, rita = dep.agent_and_reviewer(password=False)
    yield first, second, agent_key, rita
    dep.close()


def test_a_decision_in_another_process_wakes_the_waiter(pair):
    first, second, agent_key, rita = pair
    action = push(first, agent_key)
    waiter = Waiter(first, agent_key, action["action_id"], timeout_s=20)
    waiter.start()
    until_server_waits(first)
    assert waiter.is_alive()
    response = second.client(rita).post(
        f"/actions/{action['action_id']}/approve",
        json={"edits": {"payload.amount_cents": 4200}},
    )
    assert response.status_code == 200, response.text
    waiter.join(timeout=25)
    decision = waiter.response.json()
    assert decision["status"] == "approved"
    assert decision["payload"]["amount_cents"] == 4200
    assert waiter.elapsed < 15, "the waiter ran to its timeout instead of being woken"
