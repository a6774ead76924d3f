"""The embedded ticker: one `impri serve` process expires actions and delivers webhooks on time."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.conftest import SCALED
from tests.factories import refund_body
from tests.live import Deployment

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        SCALED, reason="the scaled leg runs these sweeps in a real Celery worker instead"
    ),
]


class Receiver(ThreadingHTTPServer):
    """Collects webhook POSTs on 127.0.0.1."""

    def __init__(self):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.received: list[dict] = []
        self.arrived = threading.Event()
        threading.Thread(
            target=self.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        ).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/hook"


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.server.received.append({"headers": dict(self.headers), "body": json.loads(body)})
        self.server.arrived.set()
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def deployment():
    # The receiver listens on 127.0.0.1: allowed as an operator would allow an internal one.
    dep = Deployment(
        IMPRI_TICK_S="0.5",
        IMPRI_AWAIT_REREAD_S="30",
        IMPRI_CALLBACK_ALLOWED_NETWORKS="127.0.0.1/32",
    )
    dep.server = dep.start_server()
    dep.agent_key, dep.rita = dep.agent_and_reviewer(password=False)
    yield dep
    dep.close()


def test_an_action_expires_on_time_and_its_waiter_hears_it(deployment):
    server = deployment.server
    receiver = Receiver()
    pushed = server.client(deployment.agent_key).post(
        "/actions", json=refund_body(expires_in_s=1, callback_url=receiver.url)
    )
    assert pushed.status_code == 201, pushed.text
    action_id = pushed.json()["action_id"]
    # Re-reads are 30 s apart and the wait is 20 s: the wait answers at expires_at itself
    # (a reader sees an overdue action as expired, no sweep needed), long before its timeout.
    started = time.monotonic()
    decision = server.client(deployment.agent_key, timeout=40).get(
        f"/actions/{action_id}/decision", params={"timeout_s": 20}
    )
    assert decision.json()["status"] == "expired"
    assert time.monotonic() - started < 15
    # The ticker's sweep persists the expiry (an audit event) within a tick or two.
    deadline = time.monotonic() + 15
    while True:
        trail = (
            server.client(deployment.rita)
            .get("/audit", params={"action_id": action_id})
            .json()["items"]
        )
        if "action.expired" in [event["event"] for event in trail]:
            break
        assert time.monotonic() < deadline, f"the sweep never persisted the expiry: {trail}"
        time.sleep(0.2)  # another process's sweep: nothing here to await
    assert receiver.arrived.wait(15), "the ticker never delivered the webhook"
    delivery = receiver.received[0]
    assert delivery["body"]["status"] == "expired"
    assert delivery["body"]["action_id"] == action_id
    assert delivery["headers"]["webhook-id"].startswith("msg_")
    assert delivery["headers"]["webhook-signature"].startswith("v1,")
    receiver.shutdown()
