"""What a push costs the database: each statement listed, and the count held to a budget.

Throughput is measured in bench/pushes.py; this test keeps a statement that slips back
into the push path (a lookup per push that could be read once) from going unnoticed.
"""

from __future__ import annotations

import uuid

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.factories import install_rules, refund

RULES = """
rules:
  - name: small refunds
    kind: payment.refund
    when: {path: payload.amount_cents, lte: 5000}
    then: auto_approve
    budget: {per: day, sum: payload.amount_cents, max: 100000000}
  - name: payments review
    kind: payment.*
    then: review
    group: support-leads
"""


def statements(agent, body) -> list[str]:
    with CaptureQueriesContext(connection) as queries:
        response = agent.client().post(
            "/actions", body, headers={"Idempotency-Key": str(uuid.uuid4())}
        )
    assert response.status_code == 201, response.content
    return [
        q["sql"]
        for q in queries.captured_queries
        if q["sql"].split(None, 1)[0].upper() in {"SELECT", "INSERT", "UPDATE", "DELETE"}
    ]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("amount", [1000, 9000], ids=["auto-approved", "to review"])
def test_a_push_runs_a_bounded_number_of_statements(agent, amount):
    install_rules(RULES)
    statements(agent, refund(amount))  # the first push of a process reads what it caches
    sql = statements(agent, refund(amount))
    # The key; the idempotency check; the rule set's revision; the budget's conditional
    # UPDATE or the group's notification settings; the routed and the default group (one
    # query); the action; the chain's head, the events and the head's move.
    assert len(sql) <= 9, "\n".join(sql)


def test_the_insert_stores_what_the_push_built(agent, db):
    """The push writes its action with one INSERT: read back, every field is as built."""
    from approvals import services
    from approvals.models import Action
    from approvals.schemas import ActionIn

    install_rules(RULES)
    body = refund(12345)
    body.update(
        context={"customer": "Zoë", "nested": [1, 2.5, None, {"ok": True}]},
        flags=["policy_exception"],
        target_url="https://shop.example.com/orders/10432",
    )
    built, created = services.push_action(agent.agent, ActionIn(**body), idempotency_key="k-1")
    assert created and not built._state.adding
    stored = Action.objects.get(pk=built.pk)
    for field in Action._meta.concrete_fields:
        assert getattr(stored, field.attname) == getattr(built, field.attname), field.name
    assert stored.created_at.tzinfo is not None and stored.escalate_at is None
    assert stored.context["nested"][3] == {"ok": True}
    assert stored.review_group.name == "support-leads"
