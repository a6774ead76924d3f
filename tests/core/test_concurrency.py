"""Real threads on a real database: every race ends in exactly one outcome."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import pytest
from django.utils import timezone

from approvals import services
from approvals.errors import ActionNotPending
from approvals.models import Action, ActionStatus
from audit import log as audit_log
from audit.models import AuditEvent
from tests.conftest import make_reviewer
from tests.factories import make_action, refund_body
from tests.threads import in_sleep_syscall, in_sqlite_busy_wait, run_together

pytestmark = pytest.mark.django_db(transaction=True)


def test_simultaneous_decisions_produce_exactly_one_outcome(agent):
    action = make_action(agent.agent)
    reviewers = [make_reviewer(f"reviewer{i}", "reviewers") for i in range(12)]
    calls = []
    for i, reviewer in enumerate(reviewers):
        verb = "approve" if i % 2 else "reject"
        calls.append(
            lambda r=reviewer, v=verb: r.client().post(f"/actions/{action.pk}/{v}").status_code
        )
    codes = Counter(run_together(calls))
    assert codes == {200: 1, 409: 11}
    action.refresh_from_db()
    decisions = AuditEvent.objects.filter(
        action_id=action.pk, event__in=["action.approved", "action.rejected"]
    )
    assert decisions.count() == 1
    assert decisions.get().event == f"action.{action.status}"
    assert audit_log.verify().ok


def test_simultaneous_pushes_with_one_idempotency_key_create_one_action(agent):
    def push():
        response = agent.client().post(
            "/actions", refund_body(), headers={"Idempotency-Key": "retry-me"}
        )
        return response.status_code, response.json()["action_id"]

    results = run_together([push] * 10)
    codes = Counter(code for code, _ in results)
    assert codes == {201: 1, 200: 9}
    assert len({action_id for _, action_id in results}) == 1
    assert Action.objects.count() == 1
    assert AuditEvent.objects.filter(event="action.pushed").count() == 1


def test_simultaneous_reports_record_one_result(agent, rita):
    action = make_action(agent.agent)
    services.decide(action.pk, by=rita.user, verdict="approve")
    bodies = [
        {"status": "executed", "detail": {"transaction_id": "re_1"}}
        if i % 2
        else {"status": "failed", "detail": "x"}
        for i in range(10)
    ]
    calls = [
        lambda b=b: (
            b["status"],
            agent.client().post(f"/actions/{action.pk}/result", b).status_code,
        )
        for b in bodies
    ]
    results = run_together(calls)
    action.refresh_from_db()
    # Same report as the winner: 200 (harmless repeat). The other outcome: 409.
    assert all(code == (200 if status == action.status else 409) for status, code in results)
    assert AuditEvent.objects.filter(action_id=action.pk, event="result.reported").count() == 1


def test_a_decision_racing_the_expiry_sweep_has_one_outcome(agent, rita):
    for _ in range(5):
        action = make_action(agent.agent, expires_in_s=3600)
        # Due in a moment: the decision and the sweep race for the same row.
        due = timezone.now() + timedelta(milliseconds=30)
        Action.objects.filter(pk=action.pk).update(expires_at=due)

        def decide(pk=action.pk):
            try:
                return services.decide(pk, by=rita.user, verdict="approve").status
            except ActionNotPending:
                return "refused"

        def sweep(due=due):
            # The sweep runs the moment the action is due; the decision may land just before or after.
            while timezone.now() <= due:
                pass
            return services.expire_due()

        decided, expired = run_together([decide, sweep])
        action.refresh_from_db()
        terminal = AuditEvent.objects.filter(
            action_id=action.pk, event__in=["action.approved", "action.expired"]
        )
        assert terminal.count() == 1
        if action.status == ActionStatus.APPROVED:
            assert (decided, expired) == ("approved", 0)
        else:
            assert action.status == ActionStatus.EXPIRED
            assert (decided, expired) == ("refused", 1)


def test_a_reviewer_racing_an_escalation_is_judged_by_the_group_that_wins(agent, rita):
    """decide() checks the reviewer on the locked row, not on a read taken before the lock.

    The escalation holds the row's lock and moves the action to "managers"; rita
    (in the old group) decides meanwhile. She must wait for the lock and then be
    refused: a check on an earlier, unlocked read would have let the old group
    approve an action that now belongs to another.
    """
    import threading
    import time

    from django.contrib.auth.models import Group
    from django.db import connection, transaction

    from approvals.errors import ActionNotFound

    action = make_action(agent.agent)
    managers = Group.objects.create(name="managers")
    locked, deciding, outcome = threading.Event(), threading.Event(), {}

    def escalate():
        try:
            with transaction.atomic():
                Action.objects.select_for_update().get(pk=action.pk)
                Action.objects.filter(pk=action.pk).update(review_group=managers)
                locked.set()
                assert deciding.wait(10)
                _until_blocked_on_a_lock(outcome["decider"], outcome["decider_ident"])
        finally:
            connection.close()

    def decide():
        outcome["decider"] = threading.get_native_id()
        outcome["decider_ident"] = threading.get_ident()
        try:
            assert locked.wait(10)
            deciding.set()  # the escalation then holds on until this thread waits for its lock
            services.decide(action.pk, by=rita.user, verdict="approve")
            outcome["result"] = "approved"
        except ActionNotFound as error:  # routed to another group: as if unknown (no group named)
            outcome["result"] = error.code
        finally:
            connection.close()

    threads = [threading.Thread(target=escalate), threading.Thread(target=decide)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert time.monotonic() - started < 60
    assert outcome["result"] == "not_found", outcome
    action.refresh_from_db()
    assert (action.status, action.review_group) == (ActionStatus.PENDING, managers)
    assert not AuditEvent.objects.filter(action_id=action.pk, event="action.approved").exists()


def _until_blocked_on_a_lock(decider: int, decider_ident: int, timeout: float = 10) -> None:
    """Hold on until the other session waits for our lock.

    PostgreSQL lists the waiting lock. On SQLite a second writer waits in SQLite's busy
    handler, inside its ``BEGIN IMMEDIATE``: the deciding thread's innermost frame is
    Django's cursor running it, and the handler sleeps between tries (its thread, native
    id ``decider``, shows a sleep syscall).
    """
    import time
    from pathlib import Path

    from django.db import connection

    deadline = time.monotonic() + timeout
    if connection.vendor != "postgresql":
        task = Path(f"/proc/self/task/{decider}")
        while time.monotonic() < deadline:
            if in_sqlite_busy_wait(decider_ident) or in_sleep_syscall(task):
                return
            time.sleep(0.005)  # a bounded poll of another thread's state
    else:
        with connection.cursor() as cursor:
            while time.monotonic() < deadline:
                cursor.execute("SELECT count(*) FROM pg_locks WHERE NOT granted")
                if cursor.fetchone()[0]:
                    return
                time.sleep(0.02)  # a bounded poll of another session's state
    raise AssertionError("the decision never waited for the escalation's lock")
