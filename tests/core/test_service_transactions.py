"""A service that forgot its transaction fails under test, as it would in production.

Every transition appends its audit event, and ``audit.record()`` refuses to run
outside a transaction the calling code opened; the transaction pytest-django wraps a
test in does not count (``audit.log.in_own_transaction``). The service tests
(test_expiry, test_four_eyes, test_background, ...) also run transactionally, with no
test-case transaction at all, so on PostgreSQL ``select_for_update()`` outside a
transaction fails too and on-commit hooks run as in production.

Here every ``transaction.atomic`` the code opens is made to do nothing, the bug, and
each transition must refuse to run, in both ways a test can use the database.
"""

from __future__ import annotations

from contextlib import nullcontext

import pytest
from django.db import connection, transaction
from django.db.transaction import TransactionManagementError

from approvals import services
from approvals.schemas import ActionIn
from audit.models import AuditEvent
from tests.factories import make_action, refund_body


@pytest.fixture
def forget_transactions(monkeypatch):
    """Call it, and from then on ``transaction.atomic`` opens nothing (decorator or block)."""

    def atomic(using=None, savepoint=True, durable=False):
        return using if callable(using) else nullcontext()

    return lambda: monkeypatch.setattr(transaction, "atomic", atomic)


MODES = [
    pytest.param("test case", marks=pytest.mark.django_db, id="in-a-test-case-transaction"),
    pytest.param("none", marks=pytest.mark.django_db(transaction=True), id="transactional"),
]


def refused():
    """What a transition without its transaction runs into first, on this database."""
    if connection.vendor == "postgresql":
        # The row lock comes before the audit event, and needs a transaction.
        return pytest.raises((TransactionManagementError, RuntimeError))
    return pytest.raises(RuntimeError, match="inside the transaction")


@pytest.mark.parametrize("mode", MODES)
def test_the_two_ways_a_test_uses_the_database(mode):
    # A test-case transaction encloses the test, or nothing does; neither counts as a
    # service's own transaction.
    from audit.log import in_own_transaction

    assert connection.in_atomic_block is (mode == "test case")
    assert not in_own_transaction()


@pytest.mark.parametrize("mode", MODES)
def test_a_push_without_its_transaction_is_refused(mode, agent, forget_transactions):
    before = AuditEvent.objects.count()
    forget_transactions()
    with pytest.raises(RuntimeError, match="inside the transaction"):
        services.push_action(agent.agent, ActionIn(**refund_body()))
    assert AuditEvent.objects.count() == before


@pytest.mark.parametrize("mode", MODES)
def test_a_decision_without_its_transaction_is_refused(mode, agent, rita, forget_transactions):
    action = make_action(agent.agent)
    forget_transactions()
    with refused():
        services.decide(action.pk, by=rita.user, verdict="approve")
    assert not AuditEvent.objects.filter(action_id=action.pk, event="action.approved").exists()


@pytest.mark.parametrize("mode", MODES)
def test_a_cancel_without_its_transaction_is_refused(mode, agent, forget_transactions):
    action = make_action(agent.agent)
    forget_transactions()
    with refused():
        services.cancel_action(action.pk, agent=agent.agent, reason="duplicate")


@pytest.mark.parametrize("mode", MODES)
def test_a_report_without_its_transaction_is_refused(mode, agent, rita, forget_transactions):
    action = make_action(agent.agent)
    services.decide(action.pk, by=rita.user, verdict="approve")
    forget_transactions()
    with refused():
        services.report_result(action.pk, agent=agent.agent, status="executed", detail={})


@pytest.mark.parametrize("mode", MODES)
def test_the_same_calls_pass_with_their_transactions(mode, agent, rita):
    # The control: nothing above fails for another reason.
    action, created = services.push_action(agent.agent, ActionIn(**refund_body()))
    assert created
    services.decide(action.pk, by=rita.user, verdict="approve")
    services.report_result(action.pk, agent=agent.agent, status="executed", detail={})
    other = make_action(agent.agent)
    services.cancel_action(other.pk, agent=agent.agent, reason="duplicate")
