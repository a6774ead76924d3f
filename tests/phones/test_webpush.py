"""Web Push to reviewers' phones (issue 32): subscriptions, the push outbox, a round trip.

The push service is a receiver this test starts on loopback (allowed through
IMPRI_CALLBACK_ALLOWED_NETWORKS), and the browser's keys are made here: what arrives
must carry a VAPID signature (RFC 8292) by the key the server publishes, and decrypt
(RFC 8291, with http_ece, independently of pywebpush) to a message naming the amount.
"""

from __future__ import annotations

import base64
import json
import os
import threading
import time
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import http_ece
import jwt
import pytest
import time_machine
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from django.contrib.auth.models import Group
from django.test import Client
from django.utils import timezone

from approvals.models import Action, GroupNotificationSettings
from approvals.services import escalate_due, remind_due
from tests.conftest import make_reviewer
from tests.factories import install_rules, make_action
from webpush import delivery
from webpush.models import PushDelivery, PushSubscription


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class PushService:
    """A push service on loopback: keeps each request, answers ``status``."""

    def __init__(self):
        self.received: list[dict] = []
        self.status = 201
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                length = int(self.headers.get("Content-Length", "0"))
                outer.received.append(
                    {
                        "path": self.path,
                        "headers": dict(self.headers),
                        "body": self.rfile.read(length),
                    }
                )
                self.send_response(outer.status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class Browser:
    """What a browser keeps for one subscription: its P-256 key pair and auth secret."""

    def __init__(self, endpoint: str):
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.auth = os.urandom(16)
        point = self.key.public_key().public_bytes(
            serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
        )
        self.json = {
            "endpoint": endpoint,
            "expirationTime": None,
            "keys": {"p256dh": b64url(point), "auth": b64url(self.auth)},
        }

    def decrypt(self, body: bytes) -> dict:
        plain = http_ece.decrypt(
            body, private_key=self.key, auth_secret=self.auth, version="aes128gcm"
        )
        return json.loads(plain)


@pytest.fixture
def push_service(settings, tmp_path):
    settings.IMPRI_CALLBACK_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    settings.DATA_DIR = tmp_path  # a VAPID key of this test's own
    settings.IMPRI_VAPID_PRIVATE_KEY = ""
    from webpush import keys

    keys._load.cache_clear()
    service = PushService()
    yield service
    service.close()
    keys._load.cache_clear()


def signed_in(persona) -> Client:
    client = Client(enforce_csrf_checks=True)
    client.force_login(persona.user)
    client.get("/inbox/")  # sets the CSRF cookie, as the page does for its script
    return client


def csrf(client: Client) -> dict:
    return {"X-CSRFToken": client.cookies["csrftoken"].value}


def subscribe(client: Client, body: dict):
    return client.post(
        "/inbox/push/subscriptions", json.dumps(body), "application/json", headers=csrf(client)
    )


def unsubscribe(client: Client, endpoint: str):
    data = json.dumps({"endpoint": endpoint})
    return client.delete(
        "/inbox/push/subscriptions", data, "application/json", headers=csrf(client)
    )


@pytest.mark.django_db
def test_a_pushed_action_arrives_signed_and_decrypts_to_its_amount_then_410_forgets_it(
    push_service, rita, agent
):
    client = signed_in(rita)
    browser = Browser(push_service.origin + "/push/rita-phone")
    answer = subscribe(client, browser.json)
    assert answer.status_code == 201, answer.content
    assert PushSubscription.objects.get().user == rita.user

    action = make_action(agent.agent, title="Refund $84.00 on order 10432")
    assert PushDelivery.objects.filter(action=action).count() == 1
    assert delivery.send_due() == 1
    assert len(push_service.received) == 1
    request = push_service.received[0]
    assert request["path"] == "/push/rita-phone"
    assert request["headers"]["Content-Encoding"] == "aes128gcm"
    assert int(request["headers"]["TTL"]) > 0

    # VAPID (RFC 8292): a JWT for this push service's origin, signed by the published key.
    scheme, _, params = request["headers"]["Authorization"].partition(" ")
    assert scheme == "vapid"
    fields = dict(part.strip().split("=", 1) for part in params.split(","))
    published = client.get("/inbox/push/key").json()["publicKey"]
    assert fields["k"] == published
    public = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), unb64url(fields["k"]))
    claims = jwt.decode(fields["t"], public, algorithms=["ES256"], audience=push_service.origin)
    assert claims["sub"].startswith(("mailto:", "https://"))
    # 12 h ahead, well under RFC 8292's 24 h: a push service whose clock lags still accepts it.
    assert 11 * 3600 < claims["exp"] - time.time() <= 12 * 3600

    message = browser.decrypt(request["body"])
    assert message["action_id"] == action.pk
    assert message["title"] == "Refund $84.00 on order 10432"
    assert message["amount"] == "$84.00 USD"
    assert message["url"].endswith(f"/inbox/actions/{action.pk}")
    assert set(message) <= {"action_id", "title", "amount", "url", "kind", "headline", "what"}
    assert "mug" not in json.dumps(message)  # the preview and context stay on the server

    # The browser dropped the subscription: the push service says 410, Impri forgets it.
    push_service.status = 410
    make_action(agent.agent, title="Refund $12.00 on order 10433")
    assert delivery.send_due() == 1
    assert len(push_service.received) == 2
    assert not PushSubscription.objects.exists()
    assert not PushDelivery.objects.filter(delivered_at__isnull=True, gave_up_at__isnull=True)


@pytest.mark.django_db
def test_a_failing_push_service_is_retried_and_a_decided_action_is_not_pushed(
    push_service, rita, agent
):
    client = signed_in(rita)
    assert subscribe(client, Browser(push_service.origin + "/p").json).status_code == 201
    push_service.status = 503
    action = make_action(agent.agent)
    delivery.send_due()
    row = PushDelivery.objects.get(action=action)
    assert row.delivered_at is None and row.gave_up_at is None
    assert "HTTP 503" in row.last_error and row.next_attempt_at > row.created_at

    Action.objects.filter(pk=action.pk).update(status="rejected")
    PushDelivery.objects.filter(pk=row.pk).update(next_attempt_at=row.created_at)
    push_service.status = 201
    delivery.send_due()
    row.refresh_from_db()
    assert row.gave_up_at is not None and row.last_error.startswith("skipped")
    assert len(push_service.received) == 1  # only the failed attempt reached the service


@pytest.mark.django_db
def test_only_the_groups_reviewers_devices_get_a_push(push_service, rita, mallory, agent):
    subscribe(signed_in(rita), Browser(push_service.origin + "/rita").json)
    subscribe(signed_in(mallory), Browser(push_service.origin + "/mallory").json)
    action = make_action(agent.agent)
    rows = PushDelivery.objects.filter(action=action)
    assert [r.subscription.endpoint.rsplit("/", 1)[1] for r in rows] == ["rita"]


@pytest.mark.django_db
def test_subscriptions_need_a_session_csrf_https_and_a_public_or_allowed_host(
    push_service, rita, settings
):
    body = Browser(push_service.origin + "/x").json
    anonymous = Client(enforce_csrf_checks=True)
    assert anonymous.post(
        "/inbox/push/subscriptions", json.dumps(body), "application/json"
    ).status_code in (401, 403)

    client = signed_in(rita)
    no_token = client.post("/inbox/push/subscriptions", json.dumps(body), "application/json")
    assert no_token.status_code == 403

    settings.IMPRI_CALLBACK_ALLOWED_NETWORKS = []
    refused = subscribe(client, body)
    assert refused.status_code == 400 and "loopback" in refused.json()["error"]
    settings.IMPRI_CALLBACK_ALLOWED_NETWORKS = ["10.0.0.0/8"]
    refused = subscribe(client, {**body, "endpoint": "https://127.0.0.1/x"})
    assert refused.status_code == 400
    settings.IMPRI_CALLBACK_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    for bad_keys in (
        {"p256dh": "AAAA", "auth": body["keys"]["auth"]},
        {"p256dh": body["keys"]["p256dh"]},
        "x",
    ):
        assert subscribe(client, {**body, "keys": bad_keys}).status_code == 400
    assert subscribe(client, {**body, "endpoint": "ftp://127.0.0.1/x"}).status_code == 400
    assert (
        client.post(
            "/inbox/push/subscriptions", b"{", "application/json", headers=csrf(client)
        ).status_code
        == 400
    )

    assert subscribe(client, body).status_code == 201
    assert subscribe(client, body).status_code == 201  # the same browser again: one device
    devices = client.get("/inbox/push/subscriptions").json()["devices"]
    assert len(devices) == 1 and devices[0]["endpoint_host"] == "127.0.0.1"
    page = client.get("/inbox/push/")
    assert page.status_code == 200 and b"data-device=" in page.content

    assert unsubscribe(client, body["endpoint"]).status_code == 204
    assert not PushSubscription.objects.exists()
    assert unsubscribe(client, body["endpoint"]).status_code == 404


@pytest.mark.django_db
def test_the_vapid_key_can_be_given(push_service, settings):
    from webpush import keys

    given = ec.generate_private_key(ec.SECP256R1())
    settings.IMPRI_VAPID_PRIVATE_KEY = given.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    point = given.public_key().public_bytes(
        serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
    )
    assert Client().get("/inbox/push/key").json()["publicKey"] == b64url(point)
    assert not (settings.DATA_DIR / keys.FILE_NAME).exists()


@pytest.mark.django_db
def test_escalation_and_reminders_push_to_the_groups_they_reach(push_service, agent):
    install_rules(
        "rules:\n  - name: payments\n    kind: payment.*\n    then: review\n"
        "    group: support-leads\n    escalate_after_s: 600\n    escalate_to: finance-leads\n"
    )
    lead, cfo = make_reviewer("lead", "support-leads"), make_reviewer("cfo", "finance-leads")
    subscribe(signed_in(lead), Browser(push_service.origin + "/lead").json)
    subscribe(signed_in(cfo), Browser(push_service.origin + "/cfo").json)
    GroupNotificationSettings.objects.create(
        group=Group.objects.get(name="finance-leads"), reminder_every_s=900
    )
    t0 = timezone.now().replace(microsecond=0)
    with time_machine.travel(t0, tick=False):
        action = make_action(agent.agent)
    with time_machine.travel(t0 + timedelta(seconds=601), tick=False):
        assert escalate_due() == 1
    with time_machine.travel(t0 + timedelta(seconds=1600), tick=False):
        assert remind_due() == 1
    sent = PushDelivery.objects.filter(action=action).order_by("pk")
    assert [(row.kind, row.subscription.endpoint.rsplit("/", 1)[1]) for row in sent] == [
        ("new", "lead"),
        ("escalated", "cfo"),
        ("reminder", "cfo"),
    ]
    # The lead's push is moot now the action waits for finance: dropped, not sent.
    with time_machine.travel(t0 + timedelta(seconds=1601), tick=False):
        delivery.send_due()
    arrived = [request["path"] for request in push_service.received]
    assert sorted(arrived) == ["/cfo", "/cfo"]


@pytest.mark.django_db
def test_admin_lists_devices_without_their_endpoints_and_the_push_outbox(
    push_service, rita, agent, admin_client
):
    browser = Browser(push_service.origin + "/secret-capability")
    assert subscribe(signed_in(rita), browser.json).status_code == 201
    make_action(agent.agent)
    devices = admin_client.get("/admin/webpush/pushsubscription/")
    assert devices.status_code == 200 and b"rita" in devices.content
    assert b"secret-capability" not in devices.content
    device = PushSubscription.objects.get()
    page = admin_client.get(f"/admin/webpush/pushsubscription/{device.pk}/change/")
    assert page.status_code == 200 and b"secret-capability" not in page.content
    assert admin_client.get("/admin/webpush/pushdelivery/").status_code == 200


def _answer(response) -> tuple[int, dict]:
    """A registration's answer without what differs between any two registrations."""
    body = response.json()
    return response.status_code, {k: v for k, v in body.items() if k not in ("id", "created_at")}


@pytest.mark.django_db
def test_posting_another_reviewers_endpoint_is_answered_as_a_fresh_one_and_takes_nothing(
    push_service, rita, agent
):
    """Issue 40: re-posting someone's endpoint took their subscription over, and 200 vs 201
    told whether it existed. Now the answer is a fresh registration's, the owner's row is
    untouched and keeps every push; the other reviewer's registration is held."""
    rita_browser = Browser(push_service.origin + "/push/rita-phone")
    assert subscribe(signed_in(rita), rita_browser.json).status_code == 201
    owned = PushSubscription.objects.get()
    before = PushSubscription.objects.values().get(pk=owned.pk)

    nora = make_reviewer("nora", "reviewers")
    nora_client = signed_in(nora)
    # Nora's own keys on Rita's endpoint, and, for comparison, an endpoint nobody has.
    taken = subscribe(nora_client, {**Browser("").json, "endpoint": rita_browser.json["endpoint"]})
    fresh = subscribe(nora_client, Browser(push_service.origin + "/push/nora-laptop").json)
    assert _answer(taken) == _answer(fresh)
    assert taken.status_code == 201 and set(taken.json()) == set(fresh.json())
    again = subscribe(nora_client, {**Browser("").json, "endpoint": rita_browser.json["endpoint"]})
    assert _answer(again) == _answer(fresh)
    # Nora's device list reads as if the endpoint had been hers alone.
    assert len(nora_client.get("/inbox/push/subscriptions").json()["devices"]) == 2

    assert PushSubscription.objects.values().get(pk=owned.pk) == before
    rita_devices = signed_in(rita).get("/inbox/push/subscriptions").json()["devices"]
    assert [d["id"] for d in rita_devices] == [owned.pk]

    # A push about the group's queue goes to Rita's browser with Rita's keys, and to Nora's
    # other device; nothing goes to Nora's registration of Rita's endpoint.
    make_action(agent.agent, title="Refund $84.00 on order 10432")
    assert delivery.send_due() == 2
    to_rita = [r for r in push_service.received if r["path"] == "/push/rita-phone"]
    assert len(to_rita) == 1
    assert rita_browser.decrypt(to_rita[0]["body"])["title"] == "Refund $84.00 on order 10432"
    # Deleting the endpoint from Nora's session removes only Nora's registration.
    assert unsubscribe(nora_client, rita_browser.json["endpoint"]).status_code == 204
    after = PushSubscription.objects.values().get(pk=owned.pk)
    assert {**after, "last_push_at": None} == before


@pytest.mark.django_db
def test_a_shared_browser_reaches_the_next_reviewer_once_the_first_ones_registration_goes(
    push_service, rita, agent
):
    """Rita turned notifications on in a shared browser; Nora signs in there and the page
    registers the browser for her too (held). Once Rita removes the device, Nora's
    registration owns the endpoint; once the push service drops it, both are gone."""
    shared = Browser(push_service.origin + "/push/front-desk")
    rita_client = signed_in(rita)
    assert subscribe(rita_client, shared.json).status_code == 201
    nora = make_reviewer("nora", "reviewers")
    assert subscribe(signed_in(nora), shared.json).status_code == 201  # the page, on load

    make_action(agent.agent)
    assert delivery.send_due() == 1  # one push to the browser: Rita's
    assert PushDelivery.objects.get().subscription.user == rita.user

    rita_row = PushSubscription.objects.get(user=rita.user)
    removed = rita_client.post(
        f"/inbox/push/devices/{rita_row.pk}/remove", headers=csrf(rita_client)
    )
    assert removed.status_code == 302
    make_action(agent.agent, title="Refund $12.00 on order 10433")
    assert delivery.send_due() == 1
    latest = PushDelivery.objects.order_by("-pk").first()
    assert latest.subscription.user == nora.user
    assert shared.decrypt(push_service.received[-1]["body"])["title"].startswith("Refund $12.00")

    # The browser dropped the subscription: every registration of it goes.
    push_service.status = 410
    subscribe(rita_client, shared.json)  # Rita signs in there again: held behind Nora's
    make_action(agent.agent, title="Refund $1.00 on order 10434")
    assert delivery.send_due() == 1
    assert not PushSubscription.objects.exists()
