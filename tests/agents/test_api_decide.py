"""Reviewers approve (optionally editing) or reject; nobody else can."""

from __future__ import annotations

import pytest

from approvals.models import Action, ActionStatus
from audit.models import AuditEvent
from tests.factories import make_action


@pytest.fixture
def action(agent) -> Action:
    return make_action(agent.agent)


def test_reviewer_approves_unchanged(action, rita):
    response = rita.client().post(f"/actions/{action.pk}/approve", {"note": "looks right"})
    assert response.status_code == 200, response.content
    action.refresh_from_db()
    assert action.status == ActionStatus.APPROVED
    assert action.decided_by_user == rita.user
    assert action.edited_by_human is False
    assert action.payload == action.original_payload
    assert response.json()["decided_by"] == {"type": "reviewer", "name": "rita"}
    event = AuditEvent.objects.get(action_id=action.pk, event="action.approved")
    assert event.actor_id == "rita"
    assert event.data["note"] == "looks right"
    assert len(event.data["payload_sha256"]) == 64


def test_approve_needs_no_body(action, rita):
    response = rita.client().post(f"/actions/{action.pk}/approve")
    assert response.status_code == 200, response.content
    assert response.json()["status"] == "approved"
    action.refresh_from_db()
    assert action.status == ActionStatus.APPROVED
    assert action.note == ""


def test_reviewer_edits_an_editable_field_and_approves(action, rita):
    response = rita.client().post(
        f"/actions/{action.pk}/approve", {"edits": {"payload.amount_cents": 5000}}
    )
    assert response.status_code == 200, response.content
    assert response.json()["status"] == "approved"
    action.refresh_from_db()
    assert action.status == ActionStatus.APPROVED
    assert action.payload["amount_cents"] == 5000
    assert action.original_payload["amount_cents"] == 8400
    assert action.payload["currency"] == "USD"
    assert action.edited_by_human is True
    edited = AuditEvent.objects.get(action_id=action.pk, event="action.edited")
    assert edited.data["changes"] == {"payload.amount_cents": {"before": 8400, "after": 5000}}


def test_an_edit_to_the_same_value_is_not_an_edit(action, rita):
    response = rita.client().post(
        f"/actions/{action.pk}/approve", {"edits": {"payload.amount_cents": 8400}}
    )
    assert response.status_code == 200, response.content
    action.refresh_from_db()
    assert action.status == ActionStatus.APPROVED
    assert action.edited_by_human is False
    assert not AuditEvent.objects.filter(action_id=action.pk, event="action.edited").exists()


@pytest.mark.parametrize(
    ("edits", "field", "words"),
    [
        ({"payload.currency": "EUR"}, "edits.payload.currency", "not editable"),
        ({"payload.order_id": "1"}, "edits.payload.order_id", "not editable"),
        ({"payload.amount_cents": "5000"}, "edits.payload.amount_cents", "integer"),
        ({"payload.amount_cents": 50.5}, "edits.payload.amount_cents", "integer"),
        ({"payload.amount_cents": True}, "edits.payload.amount_cents", "integer"),
        ({"payload.amount_cents": None}, "edits.payload.amount_cents", "integer"),
        ({"payload.amount_cents": {"value": 1}}, "edits.payload.amount_cents", "integer"),
        ({"amount_cents": 1}, "edits.amount_cents", "not editable"),
    ],
)
def test_a_bad_edit_is_a_422_naming_the_path(action, rita, edits, field, words):
    response = rita.client().post(f"/actions/{action.pk}/approve", {"edits": edits})
    assert response.status_code == 422, response.content
    assert response.json()["field"] == field
    assert words in response.json()["detail"]
    action.refresh_from_db()
    assert action.status == ActionStatus.PENDING
    assert action.payload == action.original_payload


def test_editable_list_items_keep_their_type(agent, rita):
    action = make_action(
        agent.agent,
        kind="order.update",
        payload={"lines": [{"sku": "MUG", "qty": 2}]},
        editable=["payload.lines.0.qty"],
    )
    response = rita.client().post(
        f"/actions/{action.pk}/approve", {"edits": {"payload.lines.0.qty": 1}}
    )
    assert response.status_code == 200, response.content
    action.refresh_from_db()
    assert action.status == ActionStatus.APPROVED
    assert action.payload == {"lines": [{"sku": "MUG", "qty": 1}]}


def test_reviewer_rejects_with_a_note(action, rita):
    response = rita.client().post(
        f"/actions/{action.pk}/reject", {"note": "outside the return window"}
    )
    assert response.status_code == 200
    action.refresh_from_db()
    assert action.status == ActionStatus.REJECTED
    assert action.note == "outside the return window"
    assert AuditEvent.objects.filter(action_id=action.pk, event="action.rejected").count() == 1


def test_a_rejection_cannot_carry_edits(action, rita):
    response = rita.client().post(
        f"/actions/{action.pk}/reject", {"edits": {"payload.amount_cents": 1}}
    )
    assert response.status_code == 422
    assert response.json()["field"] == "edits"


class TestWhoMayDecide:
    def test_an_agent_key_can_never_approve(self, action, agent):
        response = agent.client().post(f"/actions/{action.pk}/approve")
        assert response.status_code == 403
        assert "agent keys can never decide" in response.json()["detail"]
        action.refresh_from_db()
        assert action.status == ActionStatus.PENDING

    def test_an_agent_key_can_never_reject(self, action, agent):
        assert agent.client().post(f"/actions/{action.pk}/reject").status_code == 403

    def test_a_reviewer_outside_the_routed_group_gets_the_404_of_an_unknown_id(
        self, action, mallory
    ):
        response = mallory.client().post(f"/actions/{action.pk}/approve")
        unknown = mallory.client().post("/actions/act_000000000000000000000000/approve")
        assert response.status_code == unknown.status_code == 404
        assert "reviewers" not in response.json()["detail"]
        assert response.json()["code"] == unknown.json()["code"]
        for verdict in ("reject", "request-changes"):
            body = {"note": "no"}
            assert mallory.client().post(f"/actions/{action.pk}/{verdict}", body).status_code == 404
        action.refresh_from_db()
        assert action.status == ActionStatus.PENDING

    def test_an_outsider_learns_nothing_of_a_settled_action(self, action, rita, mallory):
        # Permission is checked before the state: a 409 would tell mallory it was decided.
        assert rita.client().post(f"/actions/{action.pk}/approve").status_code == 200
        response = mallory.client().post(f"/actions/{action.pk}/reject", {"note": "no"})
        assert response.status_code == 404
        assert "approved" not in response.json()["detail"]

    def test_the_answer_to_a_decision_is_the_row_as_stored(self, action, rita):
        response = rita.client().post(
            f"/actions/{action.pk}/approve", {"edits": {"payload.amount_cents": 5000}}
        )
        assert response.status_code == 200, response.content
        stored = rita.client().get(f"/actions/{action.pk}").json()
        for key in ("status", "payload", "edited_by_human", "decided_by", "decision_at", "note"):
            assert response.json().get(key) == stored.get(key), key

    def test_a_reviewer_outside_the_group_cannot_read_it(self, action, mallory):
        assert mallory.client().get(f"/actions/{action.pk}").status_code == 404

    def test_an_unknown_action_is_a_404(self, rita, db):
        assert rita.client().post("/actions/act_doesnotexist/approve").status_code == 404

    def test_a_deactivated_reviewer_is_a_401(self, action, rita):
        rita.user.is_active = False
        rita.user.save()
        assert rita.client().post(f"/actions/{action.pk}/approve").status_code == 401


class TestWrongState:
    def test_deciding_twice_is_a_409(self, action, rita, sam):
        assert rita.client().post(f"/actions/{action.pk}/approve").status_code == 200
        second = sam.client().post(f"/actions/{action.pk}/reject", {"note": "no"})
        assert second.status_code == 409
        assert "approved" in second.json()["detail"]
        action.refresh_from_db()
        assert action.status == ActionStatus.APPROVED
        assert action.decided_by_user == rita.user

    def test_deciding_a_cancelled_action_is_a_409(self, action, agent, rita):
        assert (
            agent.client()
            .post(f"/actions/{action.pk}/cancel", {"reason": "customer withdrew"})
            .status_code
            == 200
        )
        response = rita.client().post(f"/actions/{action.pk}/approve")
        assert response.status_code == 409
        assert "cancelled" in response.json()["detail"]

    def test_deciding_an_expired_action_is_a_409(self, agent, rita):
        import time_machine
        from django.utils import timezone

        action = make_action(agent.agent, expires_in_s=60)
        with time_machine.travel(timezone.now() + timezone.timedelta(seconds=61)):
            response = rita.client().post(f"/actions/{action.pk}/approve")
        assert response.status_code == 409
        assert "expired" in response.json()["detail"]
        action.refresh_from_db()
        assert action.decided_by_user is None
