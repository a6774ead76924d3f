"""Signed webhooks to agents: a real receiver on 127.0.0.1 verifies every delivery.

The receiver checks Standard Webhooks signatures with its own implementation
(validated against the specification's published test vector), so a signing
bug in Impri fails these tests instead of agreeing with itself. Time is moved
with time_machine; nothing waits for a retry in real time.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import time_machine
from django.db import connection
from django.utils import timezone

import delivery.admin  # noqa: F401  (registers the outbox admin until approvals.admin imports it)
from approvals.models import WebhookAttempt, WebhookDelivery
from delivery import sending, webhooks
from tests.factories import make_action
from tests.live import free_port
from tests.threads import run_together

# The Standard Webhooks specification's test vector (libraries/*/tests in
# github.com/standard-webhooks/standard-webhooks).
SPEC_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
SPEC_MSG_ID = "msg_p5jXN8AQM9LWM0D4loKWxJek"
SPEC_TIMESTAMP = 1614265330
SPEC_BODY = b'{"test": 2432232314}'
SPEC_SIGNATURE = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="

TOLERANCE_S = 5 * 60  # what the spec's libraries accept


# --- An independent verifier and a receiver ---------------------------------------


def verify_standard_webhook(
    secret: str, headers: dict[str, str], body: bytes, now: float | None = None
) -> bool:
    """Standard Webhooks verification written from the spec, sharing no code with Impri."""
    msg_id = headers.get("webhook-id")
    timestamp = headers.get("webhook-timestamp")
    signatures = headers.get("webhook-signature")
    if not (msg_id and timestamp and signatures):
        return False
    try:
        seconds = int(timestamp)
    except ValueError:
        return False
    if abs((time.time() if now is None else now) - seconds) > TOLERANCE_S:
        return False
    key = base64.b64decode(secret[len("whsec_") :] if secret.startswith("whsec_") else secret)
    to_sign = msg_id.encode() + b"." + timestamp.encode() + b"." + body
    expected = base64.b64encode(hmac.new(key, to_sign, hashlib.sha256).digest())
    for candidate in signatures.split(" "):
        version, _, signature = candidate.partition(",")
        if version == "v1" and hmac.compare_digest(signature.encode(), expected):
            return True
    return False


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    verified: bool

    @property
    def json(self):
        return json.loads(self.body)


class Receiver:
    """A threaded HTTP server on 127.0.0.1 that records every POST and answers as told.

    With a ``secret`` it verifies signatures and answers 401 to a bad one. The
    first ``fail_first`` requests get ``fail_status``; with ``hold_first`` the
    first request is held open until ``release()`` (a worker can be killed
    while it waits for the answer).
    """

    def __init__(
        self,
        secret: str | None = None,
        *,
        fail_first: int = 0,
        fail_status: int = 500,
        hold_first: bool = False,
        held_status: int = 200,
        extra_headers: dict | None = None,
        host: str = "127.0.0.1",
    ):
        self.secret = secret
        self.fail_first = fail_first
        self.fail_status = fail_status
        self.hold_first = hold_first
        self.held_status = held_status
        self.extra_headers = extra_headers or {}
        self.requests: list[Received] = []
        self.arrived = threading.Condition()
        self._release = threading.Event()
        self.host = host
        self.answer = b"receiver says no"  # the body of an answer of 400 or more
        self.server = ThreadingHTTPServer((host, 0), self._handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.server.server_address[1]}/hooks/impri"

    def release(self) -> None:
        self._release.set()

    def close(self) -> None:
        self._release.set()
        self.server.shutdown()
        self.server.server_close()

    def wait_for(self, count: int, timeout: float = 30) -> list[Received]:
        with self.arrived:
            if not self.arrived.wait_for(lambda: len(self.requests) >= count, timeout):
                raise AssertionError(f"expected {count} requests, got {len(self.requests)}")
            return list(self.requests)

    def ids(self) -> list[str]:
        return [r.headers.get("webhook-id") for r in self.requests]

    def _handler(self):
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                headers = {k.lower(): v for k, v in self.headers.items()}
                verified = bool(receiver.secret) and verify_standard_webhook(
                    receiver.secret, headers, body
                )
                with receiver.arrived:
                    receiver.requests.append(Received(self.path, headers, body, verified))
                    number = len(receiver.requests)
                    receiver.arrived.notify_all()
                if receiver.secret and not verified:
                    status = 401
                elif number == 1 and receiver.hold_first:
                    receiver._release.wait(120)
                    status = receiver.held_status
                elif number <= receiver.fail_first:
                    status = receiver.fail_status
                else:
                    status = 200
                answer = b"ok" if status < 400 else receiver.answer
                try:
                    self.send_response(status)
                    for name, value in receiver.extra_headers.items():
                        self.send_header(name, value)
                    self.send_header("content-length", str(len(answer)))
                    self.end_headers()
                    self.wfile.write(answer)
                except OSError:
                    pass  # the sender went away (timed out or was killed)

            def log_message(self, *args):
                pass

        return Handler


@pytest.fixture(autouse=True)
def loopback_receivers_allowed(settings):
    """The receivers here listen on 127.0.0.1: allow exactly that, as an operator would."""
    settings.IMPRI_CALLBACK_ALLOWED_NETWORKS = ["127.0.0.1/32"]


@pytest.fixture
def receivers():
    made: list[Receiver] = []

    def make(*args, **kwargs) -> Receiver:
        receiver = Receiver(*args, **kwargs)
        made.append(receiver)
        return receiver

    yield make
    for receiver in made:
        receiver.close()


def make_delivery(agent, url: str, **fields) -> WebhookDelivery:
    action = make_action(agent.agent)
    body = {
        "action_id": action.pk,
        "status": "approved",
        "decision_at": "2026-12-02T12:00:00Z",
        "payload": {"order_id": "10432", "amount_cents": 8400, "note": "Grüße ✓"},
        "edited_by_human": False,
        "decided_by": {"type": "reviewer", "name": "rita"},
        "note": "",
    }
    return WebhookDelivery.objects.create(
        action=action, event="action.approved", url=url, body=body, **fields
    )


def frozen():
    return time_machine.travel(timezone.now(), tick=False)


# --- Signing --------------------------------------------------------------------


def test_sign_reproduces_the_specs_test_vector():
    assert webhooks.sign(SPEC_SECRET, SPEC_MSG_ID, SPEC_TIMESTAMP, SPEC_BODY) == SPEC_SIGNATURE


def test_the_independent_verifier_accepts_the_spec_vector_and_nothing_else():
    headers = {
        "webhook-id": SPEC_MSG_ID,
        "webhook-timestamp": str(SPEC_TIMESTAMP),
        "webhook-signature": SPEC_SIGNATURE,
    }
    assert verify_standard_webhook(SPEC_SECRET, headers, SPEC_BODY, now=SPEC_TIMESTAMP)
    # A signature list (key rotation) with the valid one among others also verifies.
    rotated = {**headers, "webhook-signature": "v1,bm9wZQ== v2,x " + SPEC_SIGNATURE}
    assert verify_standard_webhook(SPEC_SECRET, rotated, SPEC_BODY, now=SPEC_TIMESTAMP)
    assert not verify_standard_webhook(
        SPEC_SECRET, headers, b'{"test": 2432232315}', SPEC_TIMESTAMP
    )
    assert not verify_standard_webhook(
        SPEC_SECRET, {**headers, "webhook-id": "msg_other"}, SPEC_BODY, SPEC_TIMESTAMP
    )
    assert not verify_standard_webhook(
        "whsec_" + base64.b64encode(b"x" * 32).decode(), headers, SPEC_BODY, SPEC_TIMESTAMP
    )
    # Too old a timestamp is refused: replays of a captured message don't verify.
    assert not verify_standard_webhook(
        SPEC_SECRET, headers, SPEC_BODY, now=SPEC_TIMESTAMP + TOLERANCE_S + 1
    )


def test_sign_accepts_a_secret_without_its_prefix_and_signs_the_exact_bytes():
    bare = SPEC_SECRET.removeprefix("whsec_")
    assert webhooks.sign(bare, SPEC_MSG_ID, SPEC_TIMESTAMP, SPEC_BODY) == SPEC_SIGNATURE
    assert webhooks.sign(SPEC_SECRET, SPEC_MSG_ID, SPEC_TIMESTAMP, b'{"test":2432232314}') != (
        SPEC_SIGNATURE
    )


def test_every_agent_gets_its_own_32_byte_secret(agent, other_agent):
    secrets_ = {agent.agent.webhook_secret, other_agent.agent.webhook_secret}
    assert len(secrets_) == 2
    for secret in secrets_:
        assert secret.startswith("whsec_")
        assert len(webhooks.secret_bytes(secret)) == 32


# --- Delivery -------------------------------------------------------------------


def test_a_delivery_arrives_signed_with_the_exact_body_and_is_recorded(agent, receivers):
    receiver = receivers(agent.agent.webhook_secret)
    delivery = make_delivery(agent, receiver.url)

    assert webhooks.deliver_due() == 1

    [got] = receiver.requests
    assert got.verified
    assert got.path == "/hooks/impri"
    assert got.headers["webhook-id"] == delivery.id
    assert got.headers["webhook-id"].startswith("msg_")
    assert abs(int(got.headers["webhook-timestamp"]) - time.time()) < 60
    assert got.headers["content-type"] == "application/json"
    assert got.json == delivery.body
    assert "Grüße ✓" in got.body.decode("utf-8")
    delivery.refresh_from_db()
    assert delivery.delivered_at is not None
    assert delivery.attempts == 1
    assert delivery.locked_until is None
    assert delivery.gave_up_at is None
    [attempt] = delivery.attempt_log.all()
    assert (attempt.status_code, attempt.error) == (200, "")

    # Idempotent: nothing is due any more, so a second sweep sends and writes nothing.
    assert webhooks.deliver_due() == 0
    assert len(receiver.requests) == 1
    assert WebhookAttempt.objects.count() == 1


def test_a_receiver_with_another_secret_rejects_the_delivery(agent, other_agent, receivers):
    # The receiver really checks: with the wrong agent's secret nothing verifies.
    receiver = receivers(other_agent.agent.webhook_secret)
    delivery = make_delivery(agent, receiver.url)
    assert webhooks.deliver_due() == 1
    assert not receiver.requests[0].verified
    delivery.refresh_from_db()
    assert delivery.delivered_at is None
    assert delivery.last_error.startswith("HTTP 401")


def test_a_failing_receiver_gets_the_delivery_on_retry_with_the_same_id(agent, receivers):
    receiver = receivers(agent.agent.webhook_secret, fail_first=3, fail_status=503)
    with frozen() as traveller:
        delivery = make_delivery(agent, receiver.url)
        assert webhooks.deliver_due() == 1
        for failures in (1, 2, 3):
            delivery.refresh_from_db()
            assert delivery.delivered_at is None
            assert delivery.attempts == failures
            assert delivery.last_error.startswith("HTTP 503")
            wait = (delivery.next_attempt_at - timezone.now()).total_seconds()
            full = sending.BACKOFF_BASE_S * 2 ** (failures - 1)
            assert full * 0.5 <= wait <= full  # exponential, with jitter
            assert webhooks.deliver_due() == 0  # not due yet: no early retry
            traveller.move_to(delivery.next_attempt_at)
            assert webhooks.deliver_due() == 1

    delivery.refresh_from_db()
    assert delivery.delivered_at is not None
    assert delivery.attempts == 4
    assert delivery.last_error == ""
    assert len(receiver.requests) == 4
    assert set(receiver.ids()) == {delivery.id}
    assert all(r.verified for r in receiver.requests)
    assert len({r.headers["webhook-timestamp"] for r in receiver.requests}) == 4
    assert len({r.body for r in receiver.requests}) == 1  # the same bytes every time
    assert [a.status_code for a in delivery.attempt_log.all()] == [503, 503, 503, 200]


def test_it_gives_up_a_day_after_the_delivery_was_created(agent, receivers):
    receiver = receivers(agent.agent.webhook_secret, fail_first=10_000, fail_status=500)
    with frozen() as traveller:
        delivery = make_delivery(agent, receiver.url)
        created = delivery.created_at
        sweeps = 0
        while delivery.gave_up_at is None:
            sweeps += 1
            assert sweeps < 100, "still retrying after 100 attempts"
            assert webhooks.deliver_due() == 1
            delivery.refresh_from_db()
            if delivery.gave_up_at is None:
                assert delivery.next_attempt_at <= created + timedelta(days=1)
                traveller.move_to(delivery.next_attempt_at)

        attempts = list(delivery.attempt_log.all())
        assert delivery.gave_up_at == created + timedelta(days=1)
        assert attempts[-1].at == created + timedelta(days=1)  # one last try at the one-day mark
        assert attempts[-2].at < created + timedelta(days=1)
        assert len(attempts) == delivery.attempts == len(receiver.requests) == sweeps
        assert 15 < sweeps < 40  # backoff capped at 2 h: a dead endpoint is tried ~20-30 times
        assert delivery.delivered_at is None
        assert delivery.last_error.startswith("HTTP 500")

        traveller.move_to(created + timedelta(days=3))
        assert webhooks.deliver_due() == 0
    assert len(receiver.requests) == sweeps


def test_an_unreachable_receiver_is_recorded_and_retried(agent):
    delivery = make_delivery(agent, f"http://127.0.0.1:{free_port()}/nobody-listens")
    assert webhooks.deliver_due() == 1
    delivery.refresh_from_db()
    [attempt] = delivery.attempt_log.all()
    assert attempt.status_code is None
    assert "ConnectError" in attempt.error
    assert delivery.last_error == attempt.error
    assert delivery.next_attempt_at > timezone.now()
    assert delivery.gave_up_at is None


def test_a_slow_receiver_times_out_and_the_attempt_says_so(agent, receivers, settings):
    settings.IMPRI_WEBHOOK_TIMEOUT_S = 0.3
    receiver = receivers(agent.agent.webhook_secret, hold_first=True)
    delivery = make_delivery(agent, receiver.url)
    assert webhooks.deliver_due() == 1
    receiver.release()
    delivery.refresh_from_db()
    [attempt] = delivery.attempt_log.all()
    assert "Timeout" in attempt.error
    assert attempt.duration_ms >= 300
    assert delivery.delivered_at is None
    assert delivery.next_attempt_at > timezone.now()


def test_redirects_are_not_followed(agent, receivers):
    elsewhere = receivers(agent.agent.webhook_secret)
    redirecting = receivers(
        agent.agent.webhook_secret,
        fail_first=1,
        fail_status=307,
        extra_headers={"location": elsewhere.url},
    )
    delivery = make_delivery(agent, redirecting.url)
    assert webhooks.deliver_due() == 1
    assert elsewhere.requests == []
    delivery.refresh_from_db()
    assert delivery.delivered_at is None
    assert delivery.last_error.startswith("HTTP 307")


@pytest.mark.parametrize(
    "url", ["file:///etc/passwd", "ftp://127.0.0.1/hook", "gopher://127.0.0.1:70/x", "http:///x"]
)
def test_only_http_urls_are_ever_contacted(agent, url):
    delivery = make_delivery(agent, url)
    assert webhooks.deliver_due() == 1
    delivery.refresh_from_db()
    assert delivery.gave_up_at is not None
    assert delivery.delivered_at is None
    assert "not an http(s) URL" in delivery.last_error
    [attempt] = delivery.attempt_log.all()
    assert attempt.status_code is None
    assert webhooks.deliver_due() == 0


def test_only_due_rows_are_sent_oldest_first_and_limit_is_respected(agent, receivers):
    receiver = receivers(agent.agent.webhook_secret)
    with frozen() as traveller:
        now = timezone.now()
        later = make_delivery(agent, receiver.url, next_attempt_at=now + timedelta(minutes=5))
        first = make_delivery(agent, receiver.url, next_attempt_at=now - timedelta(seconds=2))
        second = make_delivery(agent, receiver.url, next_attempt_at=now - timedelta(seconds=1))
        assert webhooks.deliver_due(limit=1) == 1
        assert receiver.ids() == [first.id]
        assert webhooks.deliver_due() == 1
        assert receiver.ids() == [first.id, second.id]
        traveller.move_to(now + timedelta(minutes=5))
        assert webhooks.deliver_due() == 1
        assert receiver.ids() == [first.id, second.id, later.id]


def test_a_dead_receiver_costs_one_timeout_per_sweep_and_holds_up_nobody_else(agent, receivers):
    live = receivers(agent.agent.webhook_secret)
    dead_url = f"http://127.0.0.1:{free_port()}/gone"
    dead = [make_delivery(agent, dead_url) for _ in range(3)]
    alive = make_delivery(agent, live.url)

    assert webhooks.deliver_due() == 2  # one try at the dead receiver, then the live one

    assert live.ids() == [alive.id]
    tried = [d for d in dead if (d.refresh_from_db() or d.attempts)]
    assert len(tried) == 1
    untouched = [d for d in dead if d.attempts == 0]
    assert all(d.next_attempt_at <= timezone.now() and d.locked_until is None for d in untouched)
    assert webhooks.deliver_due() == 1  # the next sweep tries the next one
    assert sum(WebhookDelivery.objects.get(pk=d.pk).attempts for d in dead) == 2


# --- Leases: one sender at a time, at least once ----------------------------------


@pytest.mark.django_db(transaction=True)
def test_concurrent_sweeps_never_send_one_row_twice(agent, receivers):
    receiver = receivers(agent.agent.webhook_secret)
    deliveries = [make_delivery(agent, receiver.url) for _ in range(30)]

    attempted = run_together([webhooks.deliver_due] * 4)

    assert sum(attempted) == 30
    counts = Counter(receiver.ids())
    assert counts == {d.id: 1 for d in deliveries}
    assert all(r.verified for r in receiver.requests)
    assert WebhookAttempt.objects.count() == 30
    assert WebhookDelivery.objects.filter(delivered_at__isnull=False, attempts=1).count() == 30


@pytest.mark.django_db(transaction=True)
def test_a_hung_worker_loses_its_lease_and_the_message_goes_again_with_the_same_id(
    agent, receivers
):
    # The first sender hangs on a receiver that holds the request open (as if
    # its worker had died); once its lease has run out the next sweep sends the
    # same message again, and the hung sender's late answer changes nothing.
    receiver = receivers(agent.agent.webhook_secret, hold_first=True, held_status=500)
    with frozen() as traveller:
        delivery = make_delivery(agent, receiver.url)
        hung = ThreadPoolExecutor(max_workers=1)
        first = hung.submit(lambda: (webhooks.deliver_due(), connection.close())[0])
        receiver.wait_for(1)

        assert webhooks.deliver_due() == 0  # leased by a live sender: nobody else sends
        delivery.refresh_from_db()
        assert delivery.locked_until == delivery.created_at + timedelta(seconds=sending.lease_s())
        [in_flight] = delivery.attempt_log.all()
        assert in_flight.error == webhooks.NO_OUTCOME  # visible in admin while it hangs

        traveller.move_to(delivery.locked_until)
        assert webhooks.deliver_due() == 1
        assert receiver.ids() == [delivery.id, delivery.id]
        delivery.refresh_from_db()
        assert delivery.delivered_at is not None

        receiver.release()
        assert first.result(timeout=30) == 1
        hung.shutdown()

    delivery.refresh_from_db()
    assert delivery.delivered_at is not None  # the hung sender's 500 did not undo it
    assert delivery.gave_up_at is None
    assert delivery.attempts == 2
    assert sorted(a.status_code for a in delivery.attempt_log.all()) == [200, 500]
    assert webhooks.deliver_due() == 0


def test_a_lease_taken_by_one_sweep_is_refused_to_another(agent):
    delivery = make_delivery(agent, "http://127.0.0.1:9/never")
    now = timezone.now()
    assert sending.take_lease(WebhookDelivery, delivery.pk, now) is not None
    assert sending.take_lease(WebhookDelivery, delivery.pk, now) is None
    expired = now + timedelta(seconds=sending.lease_s())
    assert sending.take_lease(WebhookDelivery, delivery.pk, expired) is not None
    delivery.refresh_from_db()
    assert delivery.attempts == 2


# --- Admin ------------------------------------------------------------------------


def test_admin_shows_deliveries_with_every_attempt_and_filters_by_outcome(
    agent, receivers, admin_client
):
    receiver = receivers(agent.agent.webhook_secret, fail_first=1, fail_status=502)
    with frozen() as traveller:
        delivered = make_delivery(agent, receiver.url)
        webhooks.deliver_due()
        delivered.refresh_from_db()
        traveller.move_to(delivered.next_attempt_at)
        webhooks.deliver_due()
    gave_up = make_delivery(agent, "ftp://example.com/x")
    webhooks.deliver_due()

    page = admin_client.get(f"/admin/approvals/webhookdelivery/{delivered.pk}/change/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "HTTP 502" in html and "200" in html
    assert delivered.id in html
    assert 'name="_save"' not in html  # read-only

    listing = admin_client.get("/admin/approvals/webhookdelivery/", {"outcome": "gave_up"})
    assert listing.status_code == 200
    assert gave_up.id in listing.content.decode()
    assert delivered.id not in listing.content.decode()
    listing = admin_client.get("/admin/approvals/webhookdelivery/", {"outcome": "delivered"})
    assert delivered.id in listing.content.decode()
    assert gave_up.id not in listing.content.decode()
    assert admin_client.get("/admin/approvals/webhookdelivery/add/").status_code == 403
