"""A ``ledger.exception`` notice reaches the reconcile group's Slack hook once per exception."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, Permission

from approvals.models import GroupNotificationSettings
from ledger import notices
from ledger.models import Notice
from tests.delivery.test_webhooks import Receiver
from tests.phones.test_webpush import Browser, push_service  # noqa: F401  (the fixture)

from .helpers import approved_refund, deliver, event, executed, refund_obj

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def loopback_receivers_allowed(settings):
    settings.IMPRI_CALLBACK_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    settings.IMPRI_BASE_URL = "https://impri.example.com"


@pytest.fixture
def finance(db):
    receiver = Receiver()
    group = Group.objects.create(name="finance")
    group.permissions.add(
        Permission.objects.get(codename="reconcile", content_type__app_label="ledger")
    )
    GroupNotificationSettings.objects.create(group=group, slack_webhook_url=receiver.url)
    yield receiver
    receiver.close()


def test_one_slack_notice_per_exception(finance, agent, lead):
    action = approved_refund(agent.agent, lead.user)
    executed(action, agent.agent)
    meta = {"impri_action_id": action.pk}
    deliver(event("refund.created", refund_obj("re_a", 9400, metadata=meta)))
    deliver(event("refund.updated", refund_obj("re_a", 9400, metadata=meta)))  # same exception
    assert notices.send_due() == 1
    assert notices.send_due() == 0
    [got] = finance.requests
    text = got.json["text"]
    assert "mismatch" in text and action.pk in text
    assert "$84.00 USD" in text and "$94.00 USD" in text
    assert "https://impri.example.com/inbox/reconciliation/?state=mismatch" in text
    # A new exception (a second refund: duplicate) is a new notice.
    deliver(event("refund.created", refund_obj("re_b", 100, metadata=meta)))
    assert notices.send_due() == 1
    assert "duplicate" in finance.requests[1].json["text"]
    assert Notice.objects.exclude(channel="push").count() == 2


def test_an_unapproved_movement_is_told_once(finance, db):
    deliver(event("refund.created", refund_obj("re_lone", 700)))
    deliver(event("refund.updated", refund_obj("re_lone", 700, status="succeeded")))
    assert notices.send_due() == 1
    assert "unapproved" in finance.requests[0].json["text"]
    assert notices.send_due() == 0


def test_reviewers_phones_in_the_reconcile_group_get_one_push(finance, agent, lead):
    from django.contrib.auth.models import User

    from webpush.delivery import message
    from webpush.models import PushDelivery, PushSubscription

    phone_owner = User.objects.create_user("fiona")
    phone_owner.groups.add(Group.objects.get(name="finance"))
    PushSubscription.objects.create(
        user=phone_owner, endpoint="https://push.example.com/f", p256dh="k", auth="a"
    )
    action = approved_refund(agent.agent, lead.user)
    executed(action, agent.agent)
    meta = {"impri_action_id": action.pk}
    deliver(event("refund.created", refund_obj("re_p", 9400, metadata=meta)))
    deliver(event("refund.updated", refund_obj("re_p", 9400, metadata=meta)))
    [push] = PushDelivery.objects.filter(kind="ledger.exception")
    said = message(push)
    assert said["headline"] == "Reconciliation exception"
    assert said["url"].endswith(f"/inbox/actions/{action.pk}#reconciliation")


def test_an_unapproved_movement_reaches_the_reconcile_groups_phones_once(finance, push_service):  # noqa: F811
    """No action to open: the push names the money and links the Reconciliation page."""
    from django.contrib.auth.models import User

    from webpush import delivery as push
    from webpush.models import PushDelivery, PushSubscription

    phone_owner = User.objects.create_user("fiona")
    phone_owner.groups.add(Group.objects.get(name="finance"))
    browser = Browser(push_service.origin + "/push/fiona-phone")
    keys = browser.json["keys"]
    PushSubscription.objects.create(
        user=phone_owner,
        endpoint=browser.json["endpoint"],
        p256dh=keys["p256dh"],
        auth=keys["auth"],
    )
    deliver(event("refund.created", refund_obj("re_nobody", 700)))
    deliver(event("refund.updated", refund_obj("re_nobody", 700, status="succeeded")))  # same
    [row] = PushDelivery.objects.filter(kind="ledger.exception")
    assert row.action is None
    assert push.send_due() == 1
    assert push.send_due() == 0
    [request] = push_service.received
    said = browser.decrypt(request["body"])
    assert said["action_id"] is None
    assert said["headline"] == "Reconciliation exception"
    assert said["amount"] == "$7.00 USD"
    assert said["title"] == "money moved without an approval"
    assert said["url"] == "https://impri.example.com/inbox/reconciliation/?state=unapproved"
    assert request["headers"]["Topic"] == said["topic"]
    assert said["topic"].startswith("movement-") and len(said["topic"]) <= 32
