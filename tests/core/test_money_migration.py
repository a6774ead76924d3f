"""Actions stored before kinds declared their money get their amounts on upgrade (approvals 0012).

The database is taken back to the migration before, actions are written as the
old code wrote them, and the upgrade must leave each with the declaration and
the amount a push would give it now, so the dashboard and the guards read them.
"""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("approvals", "0011_action_superseded_once")]
AFTER = [("approvals", "0012_action_money")]


def _migrate(targets):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


def test_the_upgrade_fills_in_each_actions_money():
    apps = _migrate(BEFORE)
    try:
        Agent = apps.get_model("approvals", "Agent")
        Action = apps.get_model("approvals", "Action")
        agent = Agent.objects.create(name="old-bot")
        now = timezone.now()

        def old(pk: str, kind: str, payload: dict):
            Action.objects.create(
                id=pk,
                agent=agent,
                kind=kind,
                title="t",
                preview_format="plain",
                payload=payload,
                original_payload=payload,
                request_hash="0" * 64,
                created_at=now,
                expires_at=now,
            )

        old(
            "act_refund00000000000000000",
            "payment.refund",
            {"amount_cents": 8400, "currency": "usd"},
        )
        old("act_payout00000000000000000", "billing.payout", {"lines": [{"amountCents": "1,200"}]})
        old("act_unread00000000000000000", "billing.payout", {"amount": "1,5 €"})
        old("act_nomoney0000000000000000", "email.send", {"to": "a@example.com"})

        apps = _migrate(AFTER)
        Action = apps.get_model("approvals", "Action")
        got = {a.pk: (a.money, a.amount_minor, a.amount_currency) for a in Action.objects.all()}
        assert got == {
            "act_refund00000000000000000": (
                [{"amount": "payload.amount_cents", "currency": "payload.currency"}],
                8400,
                "USD",
            ),
            "act_payout00000000000000000": (None, 1200, ""),
            "act_unread00000000000000000": (None, None, ""),
            "act_nomoney0000000000000000": (None, None, ""),
        }
    finally:
        _migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())
