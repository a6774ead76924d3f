"""A ``ledger.exception`` reaches webhook receivers once per exception, signed per Standard Webhooks.

Two receivers, real HTTP servers on 127.0.0.1: the operator's ``IMPRI_LEDGER_WEBHOOK_URL``
(the ledger's notice outbox, signed with ``IMPRI_LEDGER_WEBHOOK_SECRET``) and the action's
``callback_url`` (delivery's webhook outbox, signed with the agent's secret). Signatures are
checked with the ``standardwebhooks`` library, sharing no code with Impri.
"""

from __future__ import annotations

import base64
import json
import os

import pytest
import time_machine
from django.utils import timezone
from standardwebhooks.webhooks import Webhook

from approvals.models import WebhookDelivery
from delivery import webhooks
from ledger import notices
from ledger.models import Notice
from tests.delivery.test_webhooks import Receiver

from .helpers import approved_refund, deliver, event, executed, refund_obj

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def loopback_receivers_allowed(settings):
    settings.IMPRI_CALLBACK_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    settings.IMPRI_BASE_URL = "https://impri.example.com"


@pytest.fixture
def operator(settings):
    """The operator's endpoint for ledger events, and its secret."""
    secret = "whsec_" + base64.b64encode(os.urandom(24)).decode()
    made: list[Receiver] = []

    def make(**kwargs) -> Receiver:
        receiver = Receiver(secret, **kwargs)
        made.append(receiver)
        settings.IMPRI_LEDGER_WEBHOOK_URL = receiver.url
        settings.IMPRI_LEDGER_WEBHOOK_SECRET = secret
        return receiver

    yield make, secret
    for receiver in made:
        receiver.close()


def verified(secret: str, request) -> dict:
    """The payload, once ``standardwebhooks`` has verified its signature (it raises if not)."""
    return Webhook(secret).verify(request.body, request.headers)


def test_the_operator_endpoint_gets_one_signed_webhook_per_exception(operator):
    make, secret = operator
    receiver = make()
    deliver(event("refund.created", refund_obj("re_lone", 700)))
    deliver(event("refund.updated", refund_obj("re_lone", 700, status="succeeded")))  # same
    assert notices.send_due() == 1
    assert notices.send_due() == 0
    [got] = receiver.requests
    assert got.verified
    payload = verified(secret, got)
    assert payload["type"] == "ledger.exception"
    data = payload["data"]
    assert data["state"] == "unapproved"
    assert data["action_id"] is None
    assert data["movement_id"] == "re_lone"
    assert data["moved"] == {"USD": 700}
    assert data["url"] == "https://impri.example.com/inbox/reconciliation/?state=unapproved"
    assert [m["id"] for m in data["movements"]] == ["re_lone"]
    assert got.headers["webhook-id"].startswith("msg_")


def test_a_failing_operator_endpoint_gets_the_same_message_again(operator):
    make, secret = operator
    receiver = make(fail_first=1, fail_status=503)
    with time_machine.travel(timezone.now(), tick=False) as traveller:
        deliver(event("refund.created", refund_obj("re_retry", 1200)))
        assert notices.send_due() == 1
        [row] = Notice.objects.filter(channel=Notice.Channel.WEBHOOK)
        assert row.delivered_at is None and row.last_error.startswith("HTTP 503")
        assert notices.send_due() == 0  # not due yet: backoff
        traveller.move_to(row.next_attempt_at)
        assert notices.send_due() == 1
    row.refresh_from_db()
    assert row.delivered_at is not None and row.attempts == 2
    first, second = receiver.requests
    assert first.headers["webhook-id"] == second.headers["webhook-id"]
    assert first.body == second.body  # the same bytes every time
    assert verified(secret, second)["data"]["movement_id"] == "re_retry"


def test_a_bad_operator_secret_is_given_up_with_the_reason(operator, settings):
    make, _ = operator
    receiver = make()
    settings.IMPRI_LEDGER_WEBHOOK_SECRET = "not-a-secret!"
    deliver(event("refund.created", refund_obj("re_bad", 100)))
    assert notices.send_due() == 1
    [row] = Notice.objects.filter(channel=Notice.Channel.WEBHOOK)
    assert row.gave_up_at is not None and "IMPRI_LEDGER_WEBHOOK_SECRET" in row.last_error
    assert receiver.requests == []


def ledger_requests(receiver: Receiver) -> list:
    return [r for r in receiver.requests if json.loads(r.body).get("type") == "ledger.exception"]


def test_the_actions_callback_url_gets_the_exception_once_per_state(agent, lead):
    receiver = Receiver(agent.agent.webhook_secret)
    try:
        action = approved_refund(agent.agent, lead.user, callback_url=receiver.url)
        executed(action, agent.agent)
        meta = {"impri_action_id": action.pk}
        deliver(event("refund.created", refund_obj("re_m", 9400, metadata=meta)))
        deliver(event("refund.updated", refund_obj("re_m", 9400, metadata=meta)))  # same state
        webhooks.deliver_due()
        [got] = ledger_requests(receiver)
        assert got.verified
        data = verified(agent.agent.webhook_secret, got)["data"]
        assert data["state"] == "mismatch" and data["action_id"] == action.pk
        assert data["approved"] == {"USD": 8400} and data["moved"] == {"USD": 9400}
        assert data["movement_id"] == "re_m"
        # Another state (a second refund: duplicate) is another exception: told once more.
        deliver(event("refund.created", refund_obj("re_n", 100, metadata=meta)))
        webhooks.deliver_due()
        first, second = ledger_requests(receiver)
        assert verified(agent.agent.webhook_secret, second)["data"]["state"] == "duplicate"
        assert first.headers["webhook-id"] != second.headers["webhook-id"]
        rows = WebhookDelivery.objects.filter(action=action, event="ledger.exception")
        assert rows.count() == 2
    finally:
        receiver.close()


def test_without_a_callback_url_or_operator_endpoint_no_webhook_is_written(agent, lead):
    action = approved_refund(agent.agent, lead.user)
    executed(action, agent.agent)
    meta = {"impri_action_id": action.pk}
    deliver(event("refund.created", refund_obj("re_q", 9400, metadata=meta)))
    assert not WebhookDelivery.objects.filter(event="ledger.exception").exists()
    assert not Notice.objects.filter(channel__in=["webhook", "callback"]).exists()
