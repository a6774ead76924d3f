"""Prometheus: the ledger's figures on the same registry as the business metrics."""

from __future__ import annotations

import pytest
from prometheus_client import generate_latest

from plumbing.metrics import registry

from .helpers import approved_refund, deliver, event, executed, refund_obj

pytestmark = pytest.mark.django_db


def test_movements_and_exceptions_by_state(agent, lead):
    action = approved_refund(agent.agent, lead.user)
    executed(action, agent.agent)
    deliver(
        event("refund.created", refund_obj("re_m", 8400, metadata={"impri_action_id": action.pk}))
    )
    deliver(event("refund.created", refund_obj("re_lone", 100)))
    text = generate_latest(registry).decode()
    assert 'impri_ledger_movements_total{state="matched"} 1.0' in text
    assert 'impri_ledger_movements_total{state="unapproved"} 1.0' in text
    assert 'impri_ledger_exceptions{state="unapproved"} 1.0' in text
    assert 'impri_ledger_exceptions{state="duplicate"} 0.0' in text
