"""A reviewer's "explained": with the reconcile permission only; audited; on the page."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client

from approvals.errors import Forbidden
from audit.models import AuditEvent
from ledger import services as ledger
from ledger.models import Movement, Settlement

from .helpers import approved_refund, deliver, event, executed, refund_obj

pytestmark = pytest.mark.django_db


def _reconciler(user):
    user.user_permissions.add(
        Permission.objects.get(codename="reconcile", content_type__app_label="ledger")
    )
    return User.objects.get(pk=user.pk)  # a fresh object: permissions are cached


@pytest.fixture
def mismatch(agent, lead):
    action = approved_refund(agent.agent, lead.user)
    executed(action, agent.agent)
    deliver(
        event("refund.created", refund_obj("re_x", 9000, metadata={"impri_action_id": action.pk}))
    )
    assert Settlement.objects.get(action=action).state == "mismatch"
    return action


def _signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_without_the_permission_no_button_and_403(mismatch, lead):
    client = _signed_in(lead.user)
    page = client.get("/inbox/reconciliation/")
    assert page.status_code == 200
    assert mismatch.pk.encode() in page.content
    assert b"Mark explained" not in page.content
    assert b"Mark explained" not in client.get(f"/inbox/actions/{mismatch.pk}").content
    answer = client.post(
        "/inbox/reconciliation/explain", {"action_id": mismatch.pk, "reason": "ok"}
    )
    assert answer.status_code == 403
    assert Settlement.objects.get(action=mismatch).state == "mismatch"
    with pytest.raises(Forbidden):
        ledger.explain(lead.user, reason="ok", action_id=mismatch.pk)
    assert not AuditEvent.objects.filter(event="ledger.explained").exists()


def test_with_the_permission_explained_and_audited(mismatch, lead):
    user = _reconciler(lead.user)
    client = _signed_in(user)
    assert b"Mark explained" in client.get("/inbox/reconciliation/").content
    answer = client.post(
        "/inbox/reconciliation/explain",
        {"action_id": mismatch.pk, "reason": "customer got a goodwill top-up"},
    )
    assert answer.status_code == 302
    assert Settlement.objects.get(action=mismatch).state == "explained"
    assert Movement.objects.get(external_id="re_x").state == "explained"
    trail = AuditEvent.objects.get(event="ledger.explained")
    assert trail.actor_id == "lena" and trail.action_id == mismatch.pk
    assert trail.data["reason"] == "customer got a goodwill top-up"
    assert trail.data["state"] == "mismatch"
    assert mismatch.pk.encode() not in client.get("/inbox/reconciliation/").content


def test_a_reason_is_required(mismatch, lead):
    client = _signed_in(_reconciler(lead.user))
    answer = client.post("/inbox/reconciliation/explain", {"action_id": mismatch.pk, "reason": " "})
    assert answer.status_code == 422


def test_a_later_movement_reopens_an_explained_exception(mismatch, lead):
    ledger.explain(_reconciler(lead.user), reason="fine", action_id=mismatch.pk)
    meta = {"impri_action_id": mismatch.pk}
    deliver(event("refund.created", refund_obj("re_y", 9000, metadata=meta)))
    assert Settlement.objects.get(action=mismatch).state == "duplicate"


def test_an_unapproved_movement_explained(lead, db):
    deliver(event("refund.created", refund_obj("re_manual", 1200)))
    movement = Movement.objects.get(external_id="re_manual")
    ledger.explain(
        _reconciler(lead.user), reason="refunded by hand in Stripe", movement_id=movement.pk
    )
    movement.refresh_from_db()
    assert movement.state == "explained"


def test_the_dashboard_shows_the_reconciliation_panel(mismatch, lead):
    lead.user.is_staff = True
    lead.user.save()
    page = _signed_in(lead.user).get("/inbox/dashboard/")
    assert page.status_code == 200
    text = page.content.decode()
    assert 'data-figure="mismatch">1<' in text
    assert 'data-figure="matched-percent">0.0 %<' in text
    assert "$90.00 USD" in text  # the money in exceptions
