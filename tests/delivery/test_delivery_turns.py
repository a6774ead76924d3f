"""Webhooks to one destination take turns between agents.

One agent's dozen slow callbacks to a host must not hold another agent's callback
to the same host behind all of them (the security review measured 60 s): within a
destination, an agent with rows in flight goes after one without.
"""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.db import connection

from approvals.models import WebhookDelivery
from delivery import lanes, webhooks
from tests.factories import make_action

SLOW_S = 0.4


class SlowReceiver:
    """One host; every answer takes SLOW_S; the order of arrivals by path is kept."""

    def __init__(self):
        self.arrived: list[str] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                self.rfile.read(int(self.headers.get("content-length", 0)))
                with receiver.lock:
                    receiver.arrived.append(self.path)
                time.sleep(SLOW_S)
                self.send_response(200)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}{path}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def delivery(persona, url: str) -> WebhookDelivery:
    action = make_action(persona.agent)
    return WebhookDelivery.objects.create(
        action=action, event="action.approved", url=url, body={"action_id": action.pk}
    )


def test_fair_order_puts_an_agent_with_nothing_in_flight_first():
    rows = [(i, ("h", "agent:busy")) for i in range(4)] + [(9, ("h", "agent:idle"))]
    assert [pk for pk, _ in lanes.fair_order(rows)] == [0, 9, 1, 2, 3]
    in_flight = lanes.Counter({"agent:busy": 2})
    assert [pk for pk, _ in lanes.fair_order(rows, in_flight)] == [9, 0, 1, 2, 3]


@pytest.mark.django_db(transaction=True)
def test_another_agents_callback_to_the_same_host_goes_out_after_one_slow_send(
    agent, other_agent, settings
):
    settings.IMPRI_CALLBACK_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    settings.IMPRI_DELIVERY_PER_DESTINATION = 2
    host = SlowReceiver()
    try:
        for _ in range(12):
            delivery(agent, host.url("/busy"))
        delivery(other_agent, host.url("/other"))

        webhooks.deliver_in_background()  # what the ticker and the Celery task run
        deadline = time.monotonic() + 30
        while "/other" not in host.arrived:
            assert time.monotonic() < deadline, host.arrived
            time.sleep(0.02)
        # Two slow sends of the busy agent were in flight; the other agent's came next,
        # not after the remaining ten (five more rounds of SLOW_S at two at a time).
        assert host.arrived.index("/other") <= 2, host.arrived
        while WebhookDelivery.objects.filter(delivered_at__isnull=True).exists():
            assert time.monotonic() < deadline, host.arrived
            webhooks.deliver_in_background()  # the ticker's next sweeps
            time.sleep(0.1)
        assert sorted(host.arrived) == ["/busy"] * 12 + ["/other"]
    finally:
        while webhooks.LANE.active:
            time.sleep(0.05)
        host.close()
        connection.close()
