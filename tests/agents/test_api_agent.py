"""The agent's side: read, list, cancel, report the result."""

from __future__ import annotations

import pytest

from approvals import services
from approvals.models import Action, ActionStatus
from audit.models import AuditEvent
from tests.factories import make_action


@pytest.fixture
def action(agent) -> Action:
    return make_action(agent.agent)


@pytest.fixture
def approved(action, rita) -> Action:
    services.decide(
        action.pk, by=rita.user, verdict="approve", edits={"payload.amount_cents": 6000}
    )
    return action


class TestRead:
    def test_agent_reads_its_own_action(self, action, agent):
        response = agent.client().get(f"/actions/{action.pk}")
        assert response.status_code == 200
        assert response.json()["payload"] == action.payload

    def test_agent_reading_another_agents_action_is_a_403(self, action, other_agent):
        response = other_agent.client().get(f"/actions/{action.pk}")
        assert response.status_code == 403
        assert "payload" not in response.json()

    def test_reviewer_reads_an_action_in_their_queue(self, action, rita):
        assert rita.client().get(f"/actions/{action.pk}").json()["action_id"] == action.pk

    def test_an_unknown_action_is_a_404(self, agent):
        assert agent.client().get("/actions/act_nope").status_code == 404


class TestList:
    def test_agent_lists_only_its_own_actions_newest_first(self, agent, other_agent):
        mine = [make_action(agent.agent, title=f"refund {i}") for i in range(3)]
        make_action(other_agent.agent)
        body = agent.client().get("/actions").json()
        assert [item["action_id"] for item in body["items"]] == [a.pk for a in reversed(mine)]
        assert body["next_cursor"] is None

    def test_pagination_walks_every_action_once(self, agent):
        created = {make_action(agent.agent).pk for _ in range(7)}
        seen, cursor = [], None
        while True:
            params = {"limit": 3, **({"cursor": cursor} if cursor else {})}
            body = agent.client().get("/actions", **params).json()
            seen += [item["action_id"] for item in body["items"]]
            cursor = body["next_cursor"]
            if not cursor:
                break
        assert len(seen) == 7 and set(seen) == created

    def test_filters_by_status_and_kind(self, agent, approved):
        make_action(agent.agent, kind="email.send")
        client = agent.client()
        assert [
            i["action_id"] for i in client.get("/actions", status="approved").json()["items"]
        ] == [approved.pk]
        assert len(client.get("/actions", kind="email.send").json()["items"]) == 1
        assert len(client.get("/actions", status="pending").json()["items"]) == 1

    def test_reviewer_lists_their_queue_and_filters_by_agent(
        self, agent, other_agent, rita, mallory
    ):
        make_action(agent.agent)
        make_action(other_agent.agent)
        assert len(rita.client().get("/actions").json()["items"]) == 2
        assert len(rita.client().get("/actions", agent="other-bot").json()["items"]) == 1
        assert mallory.client().get("/actions").json()["items"] == []

    def test_a_bad_status_or_cursor_names_the_field(self, agent):
        bad_status = agent.client().get("/actions", status="done")
        assert bad_status.status_code == 422 and bad_status.json()["field"] == "status"
        bad_cursor = agent.client().get("/actions", cursor="!!!")
        assert bad_cursor.status_code == 422 and bad_cursor.json()["field"] == "cursor"


class TestCancel:
    def test_agent_cancels_a_pending_action(self, action, agent):
        response = agent.client().post(
            f"/actions/{action.pk}/cancel", {"reason": "customer withdrew"}
        )
        assert response.status_code == 200
        assert response.json()["decided_by"] == {"type": "agent", "name": "support-bot"}
        action.refresh_from_db()
        assert action.status == ActionStatus.CANCELLED
        assert action.note == "customer withdrew"
        assert AuditEvent.objects.filter(action_id=action.pk, event="action.cancelled").count() == 1

    def test_cancelling_a_decided_action_is_a_409(self, approved, agent):
        assert agent.client().post(f"/actions/{approved.pk}/cancel").status_code == 409

    def test_another_agent_cannot_cancel(self, action, other_agent):
        assert other_agent.client().post(f"/actions/{action.pk}/cancel").status_code == 403

    def test_a_reviewer_cannot_cancel(self, action, rita):
        assert rita.client().post(f"/actions/{action.pk}/cancel").status_code == 403


class TestReportResult:
    def test_agent_reports_execution_with_the_transaction_id(self, approved, agent):
        detail = {"transaction_id": "re_1Nv0", "amount_cents": 6000}
        response = agent.client().post(
            f"/actions/{approved.pk}/result", {"status": "executed", "detail": detail}
        )
        assert response.status_code == 200
        approved.refresh_from_db()
        assert approved.status == ActionStatus.EXECUTED
        assert approved.result_detail == detail
        event = AuditEvent.objects.get(action_id=approved.pk, event="result.reported")
        assert event.data["detail"] == detail
        approval = AuditEvent.objects.get(action_id=approved.pk, event="action.approved")
        assert event.data["approved_payload_sha256"] == approval.data["payload_sha256"]

    def test_a_failure_is_recorded_too(self, approved, agent):
        agent.client().post(
            f"/actions/{approved.pk}/result", {"status": "failed", "detail": "card expired"}
        )
        approved.refresh_from_db()
        assert approved.status == ActionStatus.FAILED

    def test_the_same_report_twice_is_harmless(self, approved, agent):
        body = {"status": "executed", "detail": {"transaction_id": "re_1"}}
        assert agent.client().post(f"/actions/{approved.pk}/result", body).status_code == 200
        assert agent.client().post(f"/actions/{approved.pk}/result", body).status_code == 200
        assert (
            AuditEvent.objects.filter(action_id=approved.pk, event="result.reported").count() == 1
        )

    def test_a_second_report_with_another_outcome_is_a_409(self, approved, agent):
        agent.client().post(
            f"/actions/{approved.pk}/result",
            {"status": "executed", "detail": {"transaction_id": "a"}},
        )
        response = agent.client().post(f"/actions/{approved.pk}/result", {"status": "failed"})
        assert response.status_code == 409
        approved.refresh_from_db()
        assert approved.status == ActionStatus.EXECUTED

    def test_reporting_on_a_pending_action_is_a_409(self, action, agent):
        response = agent.client().post(f"/actions/{action.pk}/result", {"status": "executed"})
        assert response.status_code == 409
        assert "pending" in response.json()["detail"]

    def test_reporting_on_a_rejected_action_is_a_409(self, action, agent, rita):
        services.decide(action.pk, by=rita.user, verdict="reject")
        response = agent.client().post(f"/actions/{action.pk}/result", {"status": "executed"})
        assert response.status_code == 409
        action.refresh_from_db()
        assert action.status == ActionStatus.REJECTED

    def test_an_unknown_result_status_names_the_field(self, approved, agent):
        response = agent.client().post(f"/actions/{approved.pk}/result", {"status": "done"})
        assert response.status_code == 422
        assert response.json()["field"] == "status"

    def test_another_agent_cannot_report(self, approved, other_agent):
        assert (
            other_agent.client()
            .post(f"/actions/{approved.pk}/result", {"status": "executed"})
            .status_code
            == 403
        )

    def test_a_reviewer_cannot_report(self, approved, rita):
        assert (
            rita.client().post(f"/actions/{approved.pk}/result", {"status": "executed"}).status_code
            == 403
        )


class TestDecisionEndpoint:
    def test_a_decided_action_answers_at_once(self, approved, agent):
        body = agent.client().get(f"/actions/{approved.pk}/decision", timeout_s=30).json()
        assert body["status"] == "approved"
        assert body["payload"]["amount_cents"] == 6000
        assert body["edited_by_human"] is True
        assert body["preview"]["format"] == "diff"

    def test_an_unedited_approval_answers_an_empty_diff(self, action, agent, rita):
        services.decide(action.pk, by=rita.user, verdict="approve")
        body = agent.client().get(f"/actions/{action.pk}/decision").json()
        assert body["edited_by_human"] is False
        assert body["preview"] == {"format": "diff", "body": ""}

    def test_a_pending_action_shows_the_agents_preview(self, action, agent):
        body = agent.client().get(f"/actions/{action.pk}/decision", timeout_s=0).json()
        assert body["status"] == "pending"
        assert body["preview"] == {"format": "markdown", "body": action.preview_body}
        assert body["grant"] is None and body["payload_sha256"] is None

    def test_a_reviewer_cannot_await(self, action, rita):
        assert rita.client().get(f"/actions/{action.pk}/decision").status_code == 403

    def test_another_agent_cannot_await(self, action, other_agent):
        assert other_agent.client().get(f"/actions/{action.pk}/decision").status_code == 403

    def test_a_negative_timeout_names_the_field(self, action, agent):
        response = agent.client().get(f"/actions/{action.pk}/decision", timeout_s=-1)
        assert response.status_code == 422
        assert response.json()["field"] == "timeout_s"
