"""An overdue pending action reads as expired everywhere; expire_due() persists it."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone

from approvals import services
from approvals.models import Action, ActionStatus
from audit.models import AuditEvent
from tests.factories import make_action

# Service tests: no test-case transaction around the code (tests/core/test_service_transactions.py).
pytestmark = pytest.mark.django_db(transaction=True)


def later(seconds: int):
    return time_machine.travel(timezone.now() + timedelta(seconds=seconds), tick=False)


def test_an_overdue_action_reads_as_expired_before_any_sweep(agent, rita):
    action = make_action(agent.agent, expires_in_s=60)
    with later(61):
        body = agent.client().get(f"/actions/{action.pk}").json()
        assert body["status"] == "expired"
        assert body["decided_by"] == {"type": "system", "name": "expiry"}
        decision = agent.client().get(f"/actions/{action.pk}/decision", timeout_s=5).json()
        assert decision["status"] == "expired"
        assert [
            i["action_id"] for i in rita.client().get("/actions", status="expired").json()["items"]
        ] == [action.pk]
        assert rita.client().get("/actions", status="pending").json()["items"] == []
    action.refresh_from_db()
    assert action.status == ActionStatus.PENDING  # nothing was written by reading


def test_expire_due_persists_and_audits_once(agent):
    due = make_action(agent.agent, expires_in_s=60)
    not_due = make_action(agent.agent, expires_in_s=3600)
    with later(61):
        assert services.expire_due() == 1
        assert services.expire_due() == 0  # idempotent: a second sweep changes nothing
    due.refresh_from_db()
    not_due.refresh_from_db()
    assert due.status == ActionStatus.EXPIRED
    assert due.decided_at == due.expires_at
    assert not_due.status == ActionStatus.PENDING
    assert AuditEvent.objects.filter(action_id=due.pk, event="action.expired").count() == 1


def test_expire_due_works_through_more_than_one_batch(agent):
    for _ in range(5):
        make_action(agent.agent, expires_in_s=10)
    with later(11):
        assert services.expire_due(batch_size=2) == 5
    assert Action.objects.filter(status=ActionStatus.EXPIRED).count() == 5


def test_an_expired_action_cannot_be_cancelled_or_reported(agent):
    action = make_action(agent.agent, expires_in_s=10)
    with later(11):
        assert agent.client().post(f"/actions/{action.pk}/cancel").status_code == 409
        assert (
            agent.client().post(f"/actions/{action.pk}/result", {"status": "executed"}).status_code
            == 409
        )


def test_a_decision_just_before_expiry_wins_and_the_sweep_leaves_it(agent, rita):
    action = make_action(agent.agent, expires_in_s=60)
    with later(59):
        services.decide(action.pk, by=rita.user, verdict="approve")
    with later(61):
        assert services.expire_due() == 0
    action.refresh_from_db()
    assert action.status == ActionStatus.APPROVED
