"""POST /actions: validation that names the field, idempotency, auth, limits."""

from __future__ import annotations

import pytest
import time_machine
from django.test import override_settings

from approvals.models import Action
from audit.models import AuditEvent
from tests.conftest import ApiClient
from tests.factories import refund_body


def test_push_creates_a_pending_action_with_an_unguessable_id(agent):
    response = agent.client().post("/actions", refund_body())
    assert response.status_code == 201
    body = response.json()
    assert body["status"] == "pending"
    assert body["action_id"].startswith("act_") and len(body["action_id"]) >= 24
    assert body["inbox_url"] == f"http://testserver/inbox/actions/{body['action_id']}"
    action = Action.objects.get(pk=body["action_id"])
    assert action.payload == action.original_payload == refund_body()["payload"]
    assert action.review_group.name == "reviewers"
    event = AuditEvent.objects.get(action_id=action.pk, event="action.pushed")
    assert event.event == "action.pushed"
    assert event.actor_id == "support-bot"
    assert len(event.data["payload_sha256"]) == 64


def test_push_uses_the_configured_base_url(agent, settings):
    settings.IMPRI_BASE_URL = "https://impri.example.com"
    body = agent.client().post("/actions", refund_body()).json()
    assert body["inbox_url"] == f"https://impri.example.com/inbox/actions/{body['action_id']}"


def test_expires_in_s_sets_the_expiry(agent):
    body = agent.client().post("/actions", refund_body(expires_in_s=60)).json()
    action = Action.objects.get(pk=body["action_id"])
    assert 59 <= (action.expires_at - action.created_at).total_seconds() <= 60


def test_default_expiry_comes_from_settings(agent, settings):
    settings.IMPRI_DEFAULT_EXPIRES_S = 3600
    body = agent.client().post("/actions", refund_body()).json()
    action = Action.objects.get(pk=body["action_id"])
    assert (action.expires_at - action.created_at).total_seconds() == 3600


def _without(field: str) -> dict:
    body = refund_body()
    del body[field]
    return body


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        (_without("kind"), "kind", "required"),
        (_without("payload"), "payload", "required"),
        (refund_body(payload=[1, 2]), "payload", "dictionary"),
        (refund_body(payload="refund 84"), "payload", "dictionary"),
        (refund_body(preview={"format": "html", "body": "<b>hi</b>"}), "preview.format", "plain"),
        (refund_body(preview={"format": "plain"}), "preview.body", "required"),
        (refund_body(editable=["amount_cents"]), "editable", "under payload."),
        (refund_body(editable=["payload.amount"]), "editable", "does not exist"),
        (refund_body(editable=["context.customer_message"]), "editable", "under payload."),
        (refund_body(target_url="javascript:alert(1)"), "target_url", "http"),
        (refund_body(target_url="ftp://files.example.com/x"), "target_url", "http"),
        (refund_body(title="x" * 201), "title", "at most 200"),
        (refund_body(title=""), "title", "at least 1"),
        (refund_body(kind="Payment Refund!"), "kind", "dotted"),
        (refund_body(flags=["Policy Exception"]), "flags", "lowercase"),
        (refund_body(expires_in_s=0), "expires_in_s", "greater than"),
        (refund_body(expires_in_s=10**9), "expires_in_s", "at most"),
        # JSON's true is not 1 and "3600" is not 3600 (pydantic's lax mode takes both).
        (refund_body(expires_in_s=True), "expires_in_s", "valid integer"),
        (refund_body(expires_in_s="3600"), "expires_in_s", "valid integer"),
        (refund_body(amount=8400), "amount", "not permitted"),
        (refund_body(payload={"note": "a\x00b"}, editable=[]), "payload.note", "NUL"),
    ],
)
def test_invalid_push_is_refused_naming_the_field(agent, body, field, words):
    response = agent.client().post("/actions", body)
    assert response.status_code == 422, response.content
    error = response.json()
    assert error["field"] == field
    assert field in error["detail"]
    assert words in error["detail"]
    assert not Action.objects.exists()


def test_malformed_json_is_a_400_not_a_500(agent):
    response = agent.client().post("/actions", b"{not json")
    assert response.status_code == 400
    assert not Action.objects.exists()


class TestIdempotency:
    def test_a_replayed_key_returns_the_same_action_with_200(self, agent):
        client = agent.client()
        first = client.post("/actions", refund_body(), headers={"Idempotency-Key": "refund-10432"})
        second = client.post("/actions", refund_body(), headers={"Idempotency-Key": "refund-10432"})
        assert first.status_code == 201
        assert second.status_code == 200
        assert second.json() == first.json()
        assert Action.objects.count() == 1

    def test_the_key_may_come_in_the_body(self, agent):
        client = agent.client()
        first = client.post("/actions", refund_body(idempotency_key="k1"))
        second = client.post("/actions", refund_body(idempotency_key="k1"))
        assert (first.status_code, second.status_code) == (201, 200)
        assert first.json()["action_id"] == second.json()["action_id"]

    def test_same_key_with_a_different_body_is_a_409(self, agent):
        client = agent.client()
        client.post("/actions", refund_body(), headers={"Idempotency-Key": "refund-10432"})
        bigger = refund_body(payload={**refund_body()["payload"], "amount_cents": 84000})
        response = client.post("/actions", bigger, headers={"Idempotency-Key": "refund-10432"})
        assert response.status_code == 409
        assert "refund-10432" in response.json()["detail"]
        assert Action.objects.get().payload["amount_cents"] == 8400

    def test_keys_are_scoped_per_agent(self, agent, other_agent):
        a = agent.client().post("/actions", refund_body(), headers={"Idempotency-Key": "same"})
        b = other_agent.client().post(
            "/actions", refund_body(), headers={"Idempotency-Key": "same"}
        )
        assert (a.status_code, b.status_code) == (201, 201)
        assert a.json()["action_id"] != b.json()["action_id"]

    def test_header_and_body_keys_must_agree(self, agent):
        response = agent.client().post(
            "/actions", refund_body(idempotency_key="a"), headers={"Idempotency-Key": "b"}
        )
        assert response.status_code == 422
        assert response.json()["field"] == "idempotency_key"

    def test_an_overlong_header_key_is_refused(self, agent):
        response = agent.client().post(
            "/actions", refund_body(), headers={"Idempotency-Key": "k" * 201}
        )
        assert response.status_code == 422
        assert response.json()["field"] == "Idempotency-Key"


class TestAuth:
    def test_no_key_is_a_401(self, db):
        response = ApiClient(None).post("/actions", refund_body())
        assert response.status_code == 401
        assert "Bearer" in response.json()["detail"]

    def test_an_unknown_key_is_a_401(self, db):
        assert ApiClient("imp_a_" + "x" * 40).post("/actions", refund_body()).status_code == 401

    def test_a_revoked_key_is_a_401(self, agent):
        from identity import keys

        keys.revoke_key(agent.agent.keys.get())
        assert agent.client().post("/actions", refund_body()).status_code == 401

    def test_a_disabled_agent_is_a_401(self, agent):
        agent.agent.is_active = False
        agent.agent.save()
        assert agent.client().post("/actions", refund_body()).status_code == 401

    def test_a_reviewer_token_cannot_push(self, rita):
        response = rita.client().post("/actions", refund_body())
        assert response.status_code == 403
        assert not Action.objects.exists()


def test_a_body_over_the_limit_is_a_413(agent):
    with override_settings(IMPRI_MAX_BODY_BYTES=2048):
        response = agent.client().post("/actions", refund_body(context={"blob": "x" * 4096}))
    assert response.status_code == 413
    assert "2048" in response.json()["detail"]
    assert not Action.objects.exists()


def test_too_many_requests_is_a_429(agent, settings):
    settings.IMPRI_RATE_LIMIT_PER_MIN = 3
    client = agent.client()
    # Pinned inside one minute: the limit is a per-minute window.
    with time_machine.travel("2026-12-02 10:00:05", tick=False):
        codes = [client.get("/actions").status_code for _ in range(5)]
    assert codes == [200, 200, 200, 429, 429]
    with time_machine.travel("2026-12-02 10:01:05", tick=False):
        assert client.get("/actions").status_code == 200
