"""The agent contract over REST: the seed's three calls, grants, reason codes, retried decisions."""

from __future__ import annotations

import time

import pytest
from django.core.management import call_command
from django.test import Client, override_settings

from approvals import grants, services
from approvals.models import Action, WebhookDelivery
from audit.models import AuditEvent
from tests.conftest import make_reviewer
from tests.contract import SEED_DETAIL, check_grant, check_reported, check_seed_decision
from tests.factories import REFUND, make_action

pytestmark = pytest.mark.django_db


def jwks() -> dict:
    response = Client().get("/.well-known/jwks.json")
    assert response.status_code == 200
    return response.json()


@pytest.fixture
def approved(agent, rita):
    action = make_action(agent.agent)
    services.decide(action.pk, by=rita.user, verdict="approve")
    return agent.client().get(f"/actions/{action.pk}/decision", timeout_s=0).json()


def test_the_seeds_three_calls(agent, rita):
    pushed = agent.client().post("/actions", REFUND)
    assert pushed.status_code == 201
    action_id = pushed.json()["action_id"]
    assert type(pushed.json()["created_at"]) is int

    rita.client().post(f"/actions/{action_id}/approve", {})
    decision = agent.client().get(f"/actions/{action_id}/decision", timeout_s=5).json()
    check_seed_decision(decision, action_id, REFUND["payload"])
    claims = check_grant(decision["grant"], jwks(), action_id, decision["payload_sha256"])

    reported = agent.client().post(
        f"/actions/{action_id}/result",
        {"status": "executed", "detail": SEED_DETAIL, "grant": decision["grant"]},
    )
    assert reported.status_code == 200, reported.content
    check_reported(reported.json(), action_id)
    event = AuditEvent.objects.get(action_id=action_id, event="result.reported")
    assert event.data["grant_jti"] == claims["jti"]


def test_the_grant_binds_the_edited_payload(agent, rita):
    action = make_action(agent.agent)
    services.decide(
        action.pk, by=rita.user, verdict="approve", edits={"payload.amount_cents": 5000}
    )
    decision = agent.client().get(f"/actions/{action.pk}/decision", timeout_s=0).json()
    assert decision["preview"]["format"] == "diff"
    assert '-  "amount_cents": 8400,' in decision["preview"]["body"]
    assert '+  "amount_cents": 5000,' in decision["preview"]["body"]
    assert decision["payload_sha256"] == services.payload_sha256(decision["payload"])
    check_grant(decision["grant"], jwks(), action.pk, decision["payload_sha256"])
    # The same grant on every read: the executor can count on one jti per approval.
    again = agent.client().get(f"/actions/{action.pk}/decision", timeout_s=0).json()
    assert again["grant"] == decision["grant"]


def test_a_grant_of_another_action_is_refused_with_409(agent, rita, approved):
    other = make_action(agent.agent, idempotency_key="other")
    services.decide(other.pk, by=rita.user, verdict="approve")
    response = agent.client().post(
        f"/actions/{other.pk}/result", {"status": "executed", "grant": approved["grant"]}
    )
    assert response.status_code == 409
    assert "another action" in response.json()["detail"]
    assert Action.objects.get(pk=other.pk).status == "approved"


def test_a_tampered_grant_is_refused_and_a_replayed_report_is_not(agent, approved):
    action_id = approved["action_id"]
    head, body, signature = approved["grant"].split(".")
    forged = f"{head}.{body}.{signature[:-4]}AAAA"
    refused = agent.client().post(
        f"/actions/{action_id}/result", {"status": "executed", "grant": forged}
    )
    assert refused.status_code == 409
    report = {"status": "executed", "detail": {"txn": "re_1"}, "grant": approved["grant"]}
    assert agent.client().post(f"/actions/{action_id}/result", report).status_code == 200
    assert agent.client().post(f"/actions/{action_id}/result", report).status_code == 200


def test_a_rejection_carries_its_reason_code(agent, rita):
    action = make_action(agent.agent)
    response = rita.client().post(
        f"/actions/{action.pk}/reject", {"reason": "policy", "note": "outside the 30 days"}
    )
    assert response.status_code == 200
    assert response.json()["reason"] == "policy"
    decision = agent.client().get(f"/actions/{action.pk}/decision", timeout_s=0).json()
    assert (decision["status"], decision["reason"], decision["note"]) == (
        "rejected",
        "policy",
        "outside the 30 days",
    )
    assert decision["preview"] == {"format": "diff", "body": ""}
    assert decision["grant"] is None
    event = AuditEvent.objects.get(action_id=action.pk, event="action.rejected")
    assert event.data["reason"] == "policy"


def test_an_unknown_reason_code_names_the_field(agent, rita):
    action = make_action(agent.agent)
    response = rita.client().post(f"/actions/{action.pk}/reject", {"reason": "because"})
    assert response.status_code == 422
    assert "reason" in response.content.decode()


def test_the_webhook_body_uses_the_same_shape(agent, rita, settings):
    settings.IMPRI_CALLBACK_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    action = make_action(agent.agent, callback_url="http://127.0.0.1:9/hook")
    services.decide(action.pk, by=rita.user, verdict="approve")
    body = WebhookDelivery.objects.get(action=action).body
    assert type(body["decision_at"]) is int
    assert body["preview"] == {"format": "diff", "body": ""}
    check_grant(body["grant"], jwks(), action.pk, body["payload_sha256"])


class TestRetriedDecisions:
    def test_the_same_key_answers_200_with_the_settled_action(self, agent, rita):
        action = make_action(agent.agent)
        headers = {"Idempotency-Key": "rita-approve-1"}
        body = {"edits": {"payload.amount_cents": 5000}}
        first = rita.client().post(f"/actions/{action.pk}/approve", body, headers=headers)
        again = rita.client().post(f"/actions/{action.pk}/approve", body, headers=headers)
        assert (first.status_code, again.status_code) == (200, 200)
        assert again.json()["payload"]["amount_cents"] == 5000
        assert AuditEvent.objects.filter(action_id=action.pk, event="action.approved").count() == 1

    def test_without_a_key_the_second_decision_is_409(self, agent, rita):
        action = make_action(agent.agent)
        assert rita.client().post(f"/actions/{action.pk}/approve", {}).status_code == 200
        assert rita.client().post(f"/actions/{action.pk}/approve", {}).status_code == 409

    def test_the_same_key_for_another_decision_is_409(self, agent, rita):
        action = make_action(agent.agent)
        headers = {"Idempotency-Key": "rita-1"}
        rita.client().post(f"/actions/{action.pk}/approve", {}, headers=headers)
        other = rita.client().post(
            f"/actions/{action.pk}/approve",
            {"edits": {"payload.amount_cents": 100}},
            headers=headers,
        )
        assert other.status_code == 409
        assert other.json()["code"] == "idempotency_conflict"

    def test_another_reviewer_with_the_same_key_does_not_replay(self, agent, rita):
        action = make_action(agent.agent)
        rob = make_reviewer("rob", "reviewers")
        headers = {"Idempotency-Key": "shared"}
        rita.client().post(f"/actions/{action.pk}/approve", {}, headers=headers)
        # The key replays for the reviewer who used it (so the 409 below is about whose
        # key it is, not a decide that never replays)...
        again = rita.client().post(f"/actions/{action.pk}/approve", {}, headers=headers)
        assert again.status_code == 200, again.content
        # ...and for anyone else it is a second decision on a settled action.
        other = rob.client().post(f"/actions/{action.pk}/approve", {}, headers=headers)
        assert (other.status_code, other.json()["code"]) == (409, "not_pending")

    def test_a_retried_first_of_two_approvals_counts_once(self, agent, rita):
        """The retry is answered from what the first call did: nothing is recorded twice.

        A reviewer has one review row per action whatever happens, so counting the rows
        cannot tell a retry from a second decision: the audit trail, the review's time
        and the answer can.
        """
        action = make_action(agent.agent)
        Action.objects.filter(pk=action.pk).update(approvals_required=2)
        url, headers = f"/actions/{action.pk}/approve", {"Idempotency-Key": "rita-first"}
        first = rita.client().post(url, {}, headers=headers)
        reviewed_at = action.reviews.get().at
        again = rita.client().post(url, {}, headers=headers)
        assert (first.status_code, again.status_code) == (200, 200), again.content
        assert first.json()["status"] == "pending" and again.json() == first.json()
        assert action.reviews.get().at == reviewed_at  # the retry did not decide again
        partial = AuditEvent.objects.filter(action_id=action.pk, event="review.approved")
        assert partial.count() == 1


@override_settings(IMPRI_MAX_AWAIT_S=0.3)
def test_a_decision_request_without_timeout_waits(agent):
    action = make_action(agent.agent)
    started = time.monotonic()
    body = agent.client().get(f"/actions/{action.pk}/decision").json()
    assert body["status"] == "pending"
    assert time.monotonic() - started >= 0.25  # waited (the default, capped here at 0.3 s)


def test_the_openapi_document_declares_the_idempotency_header():
    document = Client().get("/api/v1/openapi.json").json()
    for path, method in [
        ("/api/v1/actions", "post"),
        ("/api/v1/actions/{action_id}/approve", "post"),
        ("/api/v1/actions/{action_id}/reject", "post"),
    ]:
        params = document["paths"][path][method]["parameters"]
        assert {"in": "header", "name": "Idempotency-Key"}.items() <= next(
            p for p in params if p["name"] == "Idempotency-Key"
        ).items(), path
    wait = document["paths"]["/api/v1/actions/{action_id}/decision"]["get"]["parameters"]
    assert next(p for p in wait if p["name"] == "timeout_s")["schema"]["default"] == 30


def test_the_interactive_docs_load_from_this_server():
    html = Client().get("/api/v1/docs").content.decode()
    assert "/static/ninja/swagger-ui-bundle.js" in html
    assert "cdn" not in html.lower()
    assert Client().get("/static/ninja/swagger-ui-bundle.js").status_code == 200


def test_rotating_the_key_keeps_old_grants_verifiable(settings, tmp_path, agent, rita):
    settings.DATA_DIR = tmp_path
    grants.forget_keys()
    try:
        action = make_action(agent.agent)
        services.decide(action.pk, by=rita.user, verdict="approve")
        before = agent.client().get(f"/actions/{action.pk}/decision", timeout_s=0).json()
        call_command("grantkey", "rotate")
        published = jwks()
        assert len(published["keys"]) == 2
        check_grant(before["grant"], published, action.pk, before["payload_sha256"])
        after = agent.client().get(f"/actions/{action.pk}/decision", timeout_s=0).json()
        assert after["grant"] == before["grant"]  # stored with the decision (issue 40)
        report = {"status": "executed", "grant": before["grant"]}
        assert agent.client().post(f"/actions/{action.pk}/result", report).status_code == 200
        rotated = AuditEvent.objects.get(event="grant.key_rotated")
        assert rotated.data["kid"] == published["keys"][0]["kid"]
        assert (tmp_path / "grant-keys" / "current.pem").stat().st_mode & 0o077 == 0
    finally:
        grants.forget_keys()


def test_an_expired_pending_action_answers_an_empty_diff(agent):
    action = make_action(agent.agent, idempotency_key="soon")
    Action.objects.filter(pk=action.pk).update(expires_at=action.created_at)
    decision = agent.client().get(f"/actions/{action.pk}/decision", timeout_s=0).json()
    assert decision["status"] == "expired"
    assert decision["preview"] == {"format": "diff", "body": ""}
    assert type(decision["decision_at"]) is int
