"""Budgets: once an auto-approval would pass the cap, the action goes to review — even under a stampede."""

from __future__ import annotations

from collections import Counter

import pytest
import time_machine

from approvals.models import Action
from rules.models import BudgetCounter
from tests.factories import install_rules, refund
from tests.threads import run_together

BUDGET = """
rules:
  - name: small refunds
    kind: payment.refund
    when: {path: payload.amount_cents, lte: 5000}
    then: auto_approve
    budget: {per: day, sum: payload.amount_cents, max: 10000}
"""


def status_of(agent, body) -> str:
    response = agent.client().post("/actions", body)
    assert response.status_code == 201, response.content
    return response.json()["status"]


def test_sequential_pushes_stop_auto_approving_at_the_cap(agent, db):
    install_rules(BUDGET)
    with time_machine.travel("2026-12-02 09:00:00Z", tick=False):
        assert [status_of(agent, refund(3000)) for _ in range(4)] == [
            "approved",
            "approved",
            "approved",
            "pending",
        ]
        assert status_of(agent, refund(1000)) == "approved"  # exactly the cap is still within it
        assert status_of(agent, refund(1)) == "pending"
    assert BudgetCounter.objects.get().total == 10000
    over = Action.objects.filter(status="pending").first()
    assert "would be exceeded" in over.rule_trace[-1]["why"]
    with time_machine.travel("2026-12-03 00:00:01Z", tick=False):
        assert status_of(agent, refund(3000)) == "approved"  # a new day, a new budget


def test_budgets_are_per_agent(agent, other_agent, db):
    install_rules(BUDGET)
    assert [status_of(agent, refund(5000)) for _ in range(3)] == ["approved", "approved", "pending"]
    assert status_of(other_agent, refund(5000)) == "approved"


def test_a_budget_can_be_scoped_per_customer(agent, db):
    install_rules(
        "rules: [{name: per customer, kind: payment.refund, then: auto_approve,"
        " budget: {per: hour, sum: count, max: 2, scope: payload.customer_id}}]"
    )

    def for_customer(customer):
        body = refund(100)
        body["payload"]["customer_id"] = customer
        return status_of(agent, body)

    assert [for_customer("c1") for _ in range(3)] == ["approved", "approved", "pending"]
    assert for_customer("c2") == "approved"
    assert for_customer(None) == "approved"  # null is a value of its own
    without = refund(100)
    assert (
        status_of(agent, without) == "pending"
    )  # no customer id: can't be counted, so a human looks


def test_a_payload_without_the_summed_amount_goes_to_review(agent, db):
    install_rules(
        "rules: [{name: r, kind: '*', then: auto_approve, budget: {per: day, sum: payload.total, max: 100}}]"
    )
    assert status_of(agent, refund(10)) == "pending"


# Midday, so that no run straddles the daily window (time_machine moves every thread's clock).
NOON = "2026-12-02 12:00:00Z"


@pytest.mark.django_db(transaction=True)
def test_32_simultaneous_pushes_at_the_boundary_never_pass_the_cap(agent):
    install_rules(BUDGET)
    with time_machine.travel(NOON, tick=True):
        assert [status_of(agent, refund(1000)) for _ in range(9)] == ["approved"] * 9
        statuses = run_together([lambda: status_of(agent, refund(1000))] * 32)
    assert Counter(statuses) == {"approved": 1, "pending": 31}
    assert BudgetCounter.objects.get().total == 10000
    assert Action.objects.filter(status="approved").count() == 10


@pytest.mark.django_db(transaction=True)
def test_32_simultaneous_pushes_from_empty_fill_the_budget_exactly(agent):
    install_rules(BUDGET)
    with time_machine.travel(NOON, tick=True):
        statuses = run_together([lambda: status_of(agent, refund(1000))] * 32)
    assert Counter(statuses) == {"approved": 10, "pending": 22}
    assert BudgetCounter.objects.get().total == 10000


def test_a_retried_push_reserves_nothing_more_and_writes_nothing_more(agent, db):
    """A retried push is answered from the first one: no budget reserved, no event written."""
    from audit import log as audit
    from audit.models import AuditEvent

    install_rules(BUDGET)
    client = agent.client()
    with time_machine.travel("2026-12-02 09:00:00Z", tick=False):
        first = client.post("/actions", refund(3000), headers={"Idempotency-Key": "retry-1"})
        events = AuditEvent.objects.count()
        replays = [
            client.post("/actions", refund(3000), headers={"Idempotency-Key": "retry-1"})
            for _ in range(5)
        ]
        # Filling the budget afterwards does not change what the retry answers.
        assert status_of(agent, refund(5000)) == "approved"
        late = client.post("/actions", refund(3000), headers={"Idempotency-Key": "retry-1"})
    assert first.status_code == 201 and first.json()["status"] == "approved"
    assert {r.status_code for r in [*replays, late]} == {200}
    assert {r.json()["action_id"] for r in [*replays, late]} == {first.json()["action_id"]}
    assert BudgetCounter.objects.get().total == 8000  # 3000 + 5000: no retry reserved
    assert Action.objects.count() == 2
    assert AuditEvent.objects.count() == events + 3  # the second push's three events only
    assert audit.verify().ok
