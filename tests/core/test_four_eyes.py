"""Four eyes approve one figure: an approval names the payload it approves.

With approvals_required: 2, reviewer A edits the amount; reviewer B, who last
saw the pushed figure, must not approve A's figure unseen. B's approval
without the payload's hash (once it changed) or with a stale one is a 409 that
carries the current payload, and nothing is approved.
"""

from __future__ import annotations

import pytest

from approvals import services
from approvals.models import Action, ActionStatus
from audit.models import AuditEvent
from tests.conftest import make_reviewer
from tests.factories import install_rules, make_action

# Service tests: no test-case transaction around the code (tests/core/test_service_transactions.py).
pytestmark = pytest.mark.django_db(transaction=True)


TWO_EYES = """
rules:
  - name: two pairs of eyes
    kind: payment.*
    then: review
    group: finance
    approvals_required: 2
    edit_bounds: {payload.amount_cents: {min: 1, max: 2000000}}
"""


@pytest.fixture
def finance(db):
    return make_reviewer("fin-a", "finance"), make_reviewer("fin-b", "finance")


@pytest.fixture
def action(agent, finance) -> Action:
    install_rules(TWO_EYES)
    return make_action(agent.agent)


def approve(persona, action_id: str, body: dict | None = None):
    return persona.client().post(f"/actions/{action_id}/approve", body or {})


def test_b_cannot_approve_a_figure_a_changed_without_naming_it(action, finance):
    a, b = finance
    seen_by_b = b.client().get(f"/actions/{action.pk}").json()["payload_sha256"]
    edited = approve(a, action.pk, {"edits": {"payload.amount_cents": 999999}})
    assert edited.json()["status"] == "pending"

    for body in ({}, {"payload_sha256": seen_by_b}):
        response = approve(b, action.pk, body)
        assert response.status_code == 409, response.content
        answer = response.json()
        assert answer["code"] == "stale_payload"
        assert answer["payload"]["amount_cents"] == 999999
        assert answer["payload_sha256"] == edited.json()["payload_sha256"]
        assert "payload.amount_cents is now 999999" in answer["detail"]
        action.refresh_from_db()
        assert action.status == ActionStatus.PENDING
    assert not AuditEvent.objects.filter(action_id=action.pk, event="action.approved").exists()
    assert not action.reviews.filter(reviewer=b.user).exists()


def test_b_approves_the_figure_b_names(action, finance):
    a, b = finance
    edited = approve(a, action.pk, {"edits": {"payload.amount_cents": 5000}}).json()
    response = approve(b, action.pk, {"payload_sha256": edited["payload_sha256"].upper()})
    assert response.status_code == 200, response.content
    action.refresh_from_db()
    assert (action.status, action.payload["amount_cents"]) == (ActionStatus.APPROVED, 5000)
    event = AuditEvent.objects.get(action_id=action.pk, event="action.approved")
    assert event.data["approved_by"] == ["fin-a", "fin-b"]
    assert event.data["payload_sha256"] == services.payload_sha256(action.payload)


def test_an_unchanged_payload_needs_no_hash_but_a_wrong_one_is_refused(action, finance):
    a, b = finance
    assert approve(a, action.pk).json()["status"] == "pending"
    wrong = approve(b, action.pk, {"payload_sha256": "0" * 64})
    assert wrong.status_code == 409
    assert "payload_sha256 does not name this action's payload" in wrong.json()["detail"]
    assert wrong.json()["payload"]["amount_cents"] == 8400
    assert approve(b, action.pk).json()["status"] == "approved"


def test_a_hash_that_is_not_sha256_is_a_422(action, finance):
    response = approve(finance[0], action.pk, {"payload_sha256": "abc"})
    assert response.status_code == 422
    assert response.json()["field"] == "payload_sha256"


def test_a_rejection_needs_no_hash(action, finance):
    a, b = finance
    approve(a, action.pk, {"edits": {"payload.amount_cents": 5000}})
    response = b.client().post(f"/actions/{action.pk}/reject", {"note": "no"})
    assert response.json()["status"] == "rejected"


def test_the_inbox_posts_the_hash_it_displayed(action, finance, client):
    a, b = finance
    client.force_login(b.user)
    page = client.get(f"/inbox/actions/{action.pk}").content.decode()
    shown = services.payload_sha256(action.payload)
    assert f"<code data-payload-sha256>{shown}</code>" in page
    assert f'name="approve-payload_sha256" value="{shown}"' in page
    approve(a, action.pk, {"edits": {"payload.amount_cents": 999999}})
    response = client.post(
        f"/inbox/actions/{action.pk}/decide",
        {
            "approve-verdict": "approve",
            "approve-payload_sha256": shown,
            "approve-payload.amount_cents": "8400",
        },
    )
    # B's form still says 8400, but B's page was about the old payload: nothing is approved.
    assert response.status_code == 409
    body = response.content.decode()
    assert 'id="stale-payload"' in body
    assert "$9,999.99 USD" in body
    action.refresh_from_db()
    assert (action.status, action.payload["amount_cents"]) == (ActionStatus.PENDING, 999999)
