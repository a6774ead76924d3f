"""Every transition appends a chained audit event in the same transaction."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, Permission
from django.db import transaction

from approvals import services
from audit import log as audit_log
from audit.models import AuditEvent
from tests.factories import make_action

# Service tests: no test-case transaction around the code (tests/core/test_service_transactions.py).
pytestmark = pytest.mark.django_db(transaction=True)


def test_the_lifecycle_leaves_a_verifiable_trail(agent, rita):
    action = make_action(agent.agent)
    services.decide(
        action.pk, by=rita.user, verdict="approve", edits={"payload.amount_cents": 5000}
    )
    services.report_result(
        action.pk, agent=agent.agent, status="executed", detail={"transaction_id": "re_9"}
    )
    events = list(AuditEvent.objects.for_action(action.pk).values_list("event", flat=True))
    assert events == [
        "action.pushed",
        "rule.matched",
        "action.edited",
        "action.approved",
        "result.reported",
    ]
    result = audit_log.verify()
    assert result.ok and result.checked == AuditEvent.objects.count()


def test_a_rolled_back_change_leaves_no_event(agent, rita):
    action = make_action(agent.agent)
    before = AuditEvent.objects.count()
    with pytest.raises(RuntimeError), transaction.atomic():
        services.decide(action.pk, by=rita.user, verdict="approve")
        raise RuntimeError("the caller's transaction failed after the decision")
    action.refresh_from_db()
    assert action.status == "pending"
    assert AuditEvent.objects.count() == before


def test_recording_outside_a_transaction_is_refused(transactional_db):
    with pytest.raises(RuntimeError, match="inside the transaction"):
        audit_log.record("test.event", actor_type="system", actor_id="test")


def test_the_audit_api_is_for_reviewers(agent, rita):
    action = make_action(agent.agent)
    assert agent.client().get("/audit/verify").status_code == 403
    body = rita.client().get("/audit", action_id=action.pk).json()
    assert [item["event"] for item in body["items"]] == ["action.pushed", "rule.matched"]
    assert rita.client().get("/audit/verify").json()["ok"] is True


def test_reading_the_whole_log_needs_the_auditors_group_not_staff(rita):
    assert rita.client().get("/audit").status_code == 403
    rita.user.is_staff = True
    rita.user.save()
    assert rita.client().get("/audit").status_code == 403
    rita.user.groups.add(Group.objects.get_or_create(name="auditors")[0])
    assert rita.client().get("/audit").status_code == 200


def test_the_audit_log_permission_opens_the_whole_log_and_any_trail(agent, mallory):
    action = make_action(agent.agent)
    assert mallory.client().get("/audit", action_id=action.pk).status_code == 404
    mallory.user.user_permissions.add(Permission.objects.get(codename="audit_log"))
    mallory.user = type(mallory.user).objects.get(pk=mallory.user.pk)  # drop the perm cache
    assert mallory.client().get("/audit").status_code == 200
    body = mallory.client().get("/audit", action_id=action.pk).json()
    assert [item["event"] for item in body["items"]] == ["action.pushed", "rule.matched"]


def test_a_reviewer_cannot_read_the_trail_of_an_action_outside_their_queue(agent, mallory):
    action = make_action(agent.agent)
    assert mallory.client().get("/audit", action_id=action.pk).status_code == 404


def test_an_event_outside_a_transaction_of_its_own_is_refused_even_inside_a_test(db):
    # pytest-django wraps the test in a transaction; that one does not count, so a
    # service that forgot its own transaction fails here as it would in production.
    with pytest.raises(RuntimeError, match="inside the transaction"):
        audit_log.record("probe.outside", actor_type="system", actor_id="test")
    with transaction.atomic():
        event = audit_log.record("probe.inside", actor_type="system", actor_id="test")
    assert event.seq is not None
