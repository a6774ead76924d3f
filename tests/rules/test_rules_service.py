"""The seed's flow with rules: auto-approve the routine, route the rest, bound the edits."""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import sync_to_async
from django.test import override_settings

from approvals import services
from approvals.models import Action, ActionStatus
from approvals.schemas import ActionIn
from audit.models import AuditEvent
from tests.conftest import make_reviewer
from tests.factories import install_rules, refund
from waiting import hub as waiting


@pytest.fixture
def seed_rules(db):
    return install_rules()


@pytest.fixture
def lead(db):
    """A reviewer in support-leads, where the seed rules send payments."""
    return make_reviewer("lead", "support-leads")


def push(agent, body) -> dict:
    response = agent.client().post("/actions", body)
    assert response.status_code == 201, response.content
    return response.json()


def test_a_small_refund_is_approved_by_the_rule(agent, seed_rules):
    body = push(agent, refund(3000))
    assert body["status"] == "approved"
    assert body["decided_by"] == {"type": "rule", "name": "small refunds"}
    action = Action.objects.get(pk=body["action_id"])
    assert (action.rule_name, action.rule_version) == ("small refunds", seed_rules)
    assert action.rule_trace[-1] == {
        "rule": "small refunds",
        "matched": True,
        "why": action.rule_trace[-1]["why"],
    }
    approved = AuditEvent.objects.get(action_id=action.pk, event="action.approved")
    assert (approved.actor_type, approved.actor_id) == ("rule", "small refunds")
    matched = AuditEvent.objects.get(action_id=action.pk, event="rule.matched")
    assert matched.data["rule_version"] == seed_rules
    decision = agent.client().get(f"/actions/{action.pk}/decision").json()
    assert decision["status"] == "approved" and decision["payload"]["amount_cents"] == 3000


def test_the_same_refund_flagged_as_a_policy_exception_goes_to_review(agent, seed_rules):
    body = push(agent, refund(3000, flags=["policy_exception"]))
    assert body["status"] == "pending"
    action = Action.objects.get(pk=body["action_id"])
    assert action.rule_name == "everything else in payments"
    assert action.review_group.name == "support-leads"
    assert body["decided_by"] is None


def test_an_absurd_amount_is_rejected_with_the_reason(agent, seed_rules):
    body = push(agent, refund(5_000_000))
    assert body["status"] == "rejected"
    decision = agent.client().get(f"/actions/{body['action_id']}/decision").json()
    assert decision["note"] == "above the hard cap for agent refunds"
    assert decision["decided_by"] == {"type": "rule", "name": "absurd refunds"}


def test_nothing_matched_goes_to_the_default_group(agent, seed_rules, rita):
    body = push(agent, refund(3000, kind="email.send"))
    action = Action.objects.get(pk=body["action_id"])
    assert (action.status, action.review_group.name, action.rule_name) == (
        "pending",
        "reviewers",
        "",
    )
    assert rita.client().post(f"/actions/{action.pk}/approve").status_code == 200


def test_the_rules_expiry_applies_when_shorter(agent, db):
    install_rules("rules: [{name: quick, kind: '*', then: review, expires_in_s: 600}]")
    action = Action.objects.get(pk=push(agent, refund(20000))["action_id"])
    assert (action.expires_at - action.created_at).total_seconds() == 600
    action = Action.objects.get(pk=push(agent, refund(20000, expires_in_s=60))["action_id"])
    assert (action.expires_at - action.created_at).total_seconds() == 60


class TestEditBounds:
    @pytest.fixture
    def big(self, agent, seed_rules):
        return push(agent, refund(20000))["action_id"]

    def test_a_reviewer_may_reduce_the_refund(self, big, lead):
        response = lead.client().post(
            f"/actions/{big}/approve", {"edits": {"payload.amount_cents": 12000}}
        )
        assert response.status_code == 200, response.content
        assert response.json()["payload"]["amount_cents"] == 12000
        assert response.json()["payload"]["currency"] == "USD"

    @pytest.mark.parametrize(
        ("amount", "words"), [(20001, "at most 20000"), (0, "at least 1"), (-5, "at least 1")]
    )
    def test_raising_it_or_zeroing_it_is_a_422_naming_the_field(self, big, lead, amount, words):
        response = lead.client().post(
            f"/actions/{big}/approve", {"edits": {"payload.amount_cents": amount}}
        )
        assert response.status_code == 422
        assert response.json()["field"] == "edits.payload.amount_cents"
        assert words in response.json()["detail"]
        assert Action.objects.get(pk=big).status == ActionStatus.PENDING

    def test_the_currency_never_changes(self, big, lead):
        response = lead.client().post(
            f"/actions/{big}/approve", {"edits": {"payload.currency": "EUR"}}
        )
        assert response.status_code == 422
        assert response.json()["field"] == "edits.payload.currency"


class TestRouting:
    def test_a_reviewer_outside_the_routed_group_gets_404(self, agent, seed_rules, rita):
        action_id = push(agent, refund(20000))["action_id"]
        response = rita.client().post(
            f"/actions/{action_id}/approve"
        )  # rita reviews the default group only
        assert response.status_code == 404
        assert "support-leads" not in response.json()["detail"]

    def test_the_decision_records_the_rule_and_its_version(self, agent, seed_rules, lead):
        action_id = push(agent, refund(20000))["action_id"]
        lead.client().post(f"/actions/{action_id}/approve")
        event = AuditEvent.objects.get(action_id=action_id, event="action.approved")
        assert (event.data["rule"], event.data["rule_version"]) == (
            "everything else in payments",
            seed_rules,
        )


class TestTwoApprovals:
    @pytest.fixture
    def action_id(self, agent, db):
        install_rules(
            "rules: [{name: two-man, kind: 'payment.*', then: review, group: finance, approvals_required: 2}]"
        )
        return push(agent, refund(90000))["action_id"]

    @pytest.fixture
    def finance(self, db):
        return make_reviewer("fin1", "finance"), make_reviewer("fin2", "finance")

    def test_it_stays_pending_until_two_different_reviewers_approve(self, action_id, finance):
        first, second = finance
        assert first.client().post(f"/actions/{action_id}/approve").json()["status"] == "pending"
        assert (
            first.client().post(f"/actions/{action_id}/approve").json()["status"] == "pending"
        )  # never twice
        assert Action.objects.get(pk=action_id).status == ActionStatus.PENDING
        assert second.client().post(f"/actions/{action_id}/approve").json()["status"] == "approved"
        event = AuditEvent.objects.get(action_id=action_id, event="action.approved")
        assert event.data["approved_by"] == ["fin1", "fin2"]

    def test_one_rejection_rejects(self, action_id, finance):
        first, second = finance
        first.client().post(f"/actions/{action_id}/approve")
        assert (
            second.client().post(f"/actions/{action_id}/reject", {"note": "no"}).json()["status"]
            == "rejected"
        )

    def test_an_edit_restarts_the_count(self, agent, finance, db):
        install_rules(
            "rules: [{name: two-man, kind: 'payment.*', then: review, group: finance, approvals_required: 2,"
            " edit_bounds: {payload.amount_cents: {min: 1, max: original}}}]"
        )
        action_id = push(agent, refund(90000))["action_id"]
        first, second = finance
        first.client().post(f"/actions/{action_id}/approve")
        body = (
            second.client()
            .post(f"/actions/{action_id}/approve", {"edits": {"payload.amount_cents": 50000}})
            .json()
        )
        assert body["status"] == "pending"  # fin1 approved $900, not $500
        assert body["payload"]["amount_cents"] == 50000
        body = (
            first.client()
            .post(f"/actions/{action_id}/approve", {"payload_sha256": body["payload_sha256"]})
            .json()
        )
        assert (body["status"], body["payload"]["amount_cents"], body["edited_by_human"]) == (
            "approved",
            50000,
            True,
        )


@pytest.mark.django_db(transaction=True)
@override_settings(IMPRI_AWAIT_REREAD_S=30)
async def test_an_auto_decision_answers_a_waiter_immediately(agent):
    await sync_to_async(install_rules)()
    action, _ = await sync_to_async(services.push_action)(agent.agent, ActionIn(**refund(2500)))
    result = await asyncio.wait_for(
        services.await_decision(
            action.pk, watch=waiting.hub().watch, agent=agent.agent, timeout_s=20
        ),
        2,
    )
    assert result.status == "approved"
