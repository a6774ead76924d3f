"""Real threads on a real database: identical gated calls share one action, the upstream is claimed once."""

from __future__ import annotations

import pytest

from approvals import services as approvals
from approvals.models import Action
from audit.models import AuditEvent
from gateway import services
from gateway.models import GatedCall, Upstream
from tests.threads import run_together

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def payments(db):
    return Upstream.objects.create(
        name="payments", url="http://127.0.0.1:9/mcp", default_policy="review"
    )


def test_simultaneous_identical_calls_create_one_action(payments, agent):
    arguments = {"order_id": "A1", "amount_cents": 8400}

    def call():
        return services.begin(agent.agent, payments, "create_refund", dict(arguments)).pk

    ids = run_together([call] * 8)
    assert len(set(ids)) == 1
    assert Action.objects.count() == 1
    assert GatedCall.objects.count() == 1


def test_simultaneous_claims_call_the_upstream_once(payments, agent, rita):
    action = services.begin(agent.agent, payments, "create_refund", {"order_id": "B"})
    action = approvals.decide(action.pk, by=rita.user, verdict="approve")

    def claim_and_record():
        won = services.claim(action)
        if won:  # only the winner goes on to call the upstream, and records it
            services.called(action, "jti", "0" * 64)
        return won

    won = run_together([claim_and_record] * 8)
    assert sorted(won) == [False] * 7 + [True]
    assert (
        AuditEvent.objects.filter(action_id=action.pk, event="gateway.upstream_called").count() == 1
    )
