"""Retention: delivery history older than IMPRI_RETENTION_DAYS goes; the audit log never does."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import Group
from django.db import connection
from django.utils import timezone

from approvals import services
from approvals.models import Action, Notification, WebhookAttempt, WebhookDelivery
from audit.models import AuditEvent
from delivery import retention, tasks
from rules.models import BudgetCounter
from tests.factories import make_action


@pytest.fixture(autouse=True)
def _public_callback_host(hosts):
    hosts["agent.example.com"] = ["93.184.215.14"]  # a public address, never contacted here


# Service tests: no test-case transaction around the code (tests/core/test_service_transactions.py).
pytestmark = pytest.mark.django_db(transaction=True)

DAYS = 30


def delivery(agent, *, created_days_ago: float, **ends) -> WebhookDelivery:
    action = make_action(agent, callback_url="https://agent.example.com/hook")
    services.cancel_action(action.pk, agent=agent, reason="test")
    row = WebhookDelivery.objects.get(action=action)
    WebhookAttempt.objects.create(delivery=row, status_code=500, error="HTTP 500")
    WebhookAttempt.objects.create(delivery=row, status_code=200)
    at = timezone.now() - timedelta(days=created_days_ago)
    WebhookDelivery.objects.filter(pk=row.pk).update(created_at=at, **ends)
    return row


def notification(action: Action, **ends) -> Notification:
    group = Group.objects.get_or_create(name="support-leads")[0]
    return Notification.objects.create(
        action=action, group=group, kind="new", channel="email", **ends
    )


def ago(days: float):
    return timezone.now() - timedelta(days=days)


def test_prune_removes_only_what_is_older_than_the_retention(agent):
    old_delivered = delivery(agent.agent, created_days_ago=40, delivered_at=ago(40))
    old_gave_up = delivery(agent.agent, created_days_ago=41, gave_up_at=ago(40))
    recent = delivery(agent.agent, created_days_ago=20, delivered_at=ago(20))
    # Created long ago but still being retried: never pruned, however old.
    still_open = delivery(agent.agent, created_days_ago=40, attempts=3, last_error="HTTP 500")
    action = Action.objects.first()
    old_note = notification(action, delivered_at=ago(31))
    old_note_gave_up = notification(action, gave_up_at=ago(35))
    new_note = notification(action, delivered_at=ago(29))
    open_note = notification(action)
    Notification.objects.filter(pk=open_note.pk).update(created_at=ago(60))
    old_window = BudgetCounter.objects.create(
        rule="small refunds", scope="agent:support-bot", window_start=ago(31), total=100
    )
    today = BudgetCounter.objects.create(
        rule="small refunds",
        scope="agent:support-bot",
        window_start=timezone.now().replace(hour=0, minute=0, second=0, microsecond=0),
        total=100,
    )
    events = AuditEvent.objects.count()

    done = retention.prune(days=DAYS)

    assert done == {
        "webhook_deliveries": 2,
        "webhook_attempts": 4,
        "notifications": 2,
        "budget_counters": 1,
    }
    assert set(WebhookDelivery.objects.values_list("pk", flat=True)) == {recent.pk, still_open.pk}
    assert not WebhookAttempt.objects.filter(delivery_id__in=[old_delivered.pk, old_gave_up.pk])
    assert WebhookAttempt.objects.filter(delivery_id=recent.pk).count() == 2
    assert set(Notification.objects.values_list("pk", flat=True)) == {new_note.pk, open_note.pk}
    assert not Notification.objects.filter(pk__in=[old_note.pk, old_note_gave_up.pk])
    assert list(BudgetCounter.objects.values_list("pk", flat=True)) == [today.pk]
    assert not BudgetCounter.objects.filter(pk=old_window.pk)
    assert AuditEvent.objects.count() == events
    assert Action.objects.count() == 4  # actions are the record: never pruned


def test_the_audit_log_is_never_pruned_however_old(agent):
    delivery(agent.agent, created_days_ago=1, delivered_at=ago(1))
    events = list(AuditEvent.objects.values_list("seq", "hash"))
    assert events
    # A year from now everything here is past any retention.
    done = retention.prune(now=timezone.now() + timedelta(days=365), days=1)
    assert done["webhook_deliveries"] == 1
    assert list(AuditEvent.objects.values_list("seq", "hash")) == events


def test_a_retention_of_zero_keeps_everything(agent, settings):
    settings.IMPRI_RETENTION_DAYS = 0
    delivery(agent.agent, created_days_ago=400, delivered_at=ago(400))
    assert tasks.prune_history() == {}
    assert WebhookDelivery.objects.count() == 1


def test_the_task_uses_the_configured_retention(agent, settings):
    settings.IMPRI_RETENTION_DAYS = 10
    delivery(agent.agent, created_days_ago=12, delivered_at=ago(11))
    delivery(agent.agent, created_days_ago=9, delivered_at=ago(9))
    assert tasks.prune_history()["webhook_deliveries"] == 1
    assert tasks.prune_history()["webhook_deliveries"] == 0  # idempotent


@pytest.mark.parametrize("model", [WebhookDelivery, Notification])
def test_the_due_sweep_reads_the_partial_index_of_open_rows(model):
    query = model.objects.due(timezone.now()).order_by("next_attempt_at").values("pk")[:50].query
    sql, params = query.sql_with_params()
    index = f"{model._meta.model_name}_due"
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            # Test tables are tiny: without this the planner scans them whole.
            cursor.execute("SET LOCAL enable_seqscan = off")
            cursor.execute(f"EXPLAIN {sql}", params)
        else:
            cursor.execute(f"EXPLAIN QUERY PLAN {sql}", params)
        plan = " ".join(str(row) for row in cursor.fetchall())
    assert index in plan, plan


def test_beat_runs_the_prune_and_the_verify_on_a_schedule(settings):
    from plumbing.celery import app

    schedule = {
        entry["task"]: entry["schedule"] for entry in settings.CELERY_BEAT_SCHEDULE.values()
    }
    assert schedule["delivery.tasks.prune_history"] == 3600
    assert schedule["audit.tasks.verify_audit_chain"] == settings.IMPRI_AUDIT_VERIFY_EVERY_S
    app.loader.import_default_modules()
    assert {"delivery.tasks.prune_history", "audit.tasks.verify_audit_chain"} <= set(app.tasks)


def test_the_embedded_ticker_runs_them_hourly_after_its_first_minute(settings):
    from impri.ticker import due, jobs_on

    settings.IMPRI_AUDIT_VERIFY_EVERY_S = 600
    housekeeping = [job for job in jobs_on("delivery") if job.first_after_s]
    assert [job.task for job in housekeeping] == [
        "delivery.tasks.prune_history",
        "audit.tasks.verify_audit_chain",
    ]
    prune, verify = housekeeping
    runs: dict[str, float] = {}
    assert due(housekeeping, 1000.0, runs) == []  # at start: not during it
    assert due(housekeeping, 1059.0, runs) == []
    assert due(housekeeping, 1060.0, runs) == [prune, verify]
    assert due(housekeeping, 1100.0, runs) == []
    assert due(housekeeping, 1660.0, runs) == [verify]
    assert due(housekeeping, 4660.0, runs) == [prune, verify]
    settings.IMPRI_AUDIT_VERIFY_EVERY_S = 0
    runs = {}
    assert due(housekeeping, 9999.0, runs) == []
    assert due(housekeeping, 10059.0, runs) == [prune]  # no periodic verify when it is 0


def test_the_prune_command_says_what_it_removed(agent):
    from io import StringIO

    from django.core.management import CommandError, call_command

    delivery(agent.agent, created_days_ago=12, delivered_at=ago(11))
    out = StringIO()
    call_command("prune", "--days", "10", stdout=out)
    assert out.getvalue().strip() == (
        "Pruned what is older than 10 days: 1 webhook deliveries, 2 webhook attempts, "
        "0 notifications, 0 budget counters."
    )
    with pytest.raises(CommandError, match="--days must be at least 1"):
        call_command("prune", "--days", "0")


def test_every_registered_outbox_is_pruned_and_an_apps_is_listed_when_rows_went(agent, rita):
    from delivery import outboxes
    from webpush.models import PushDelivery, PushSubscription

    pruned = {box.name: box.pruned_as for box in outboxes.REGISTERED.values()}
    # The Slack app's rows are its messages' handles (a later change updates a message).
    assert pruned == {
        "webhooks": "webhook_deliveries",
        "notifications": "notifications",
        "slack": "",
        "push": "push_deliveries",
        "ledger_notices": "ledger_notices",
    }
    action = make_action(agent.agent)
    phone = PushSubscription.objects.create(
        user=rita.user, endpoint="https://push.example.com/1", p256dh="k", auth="a"
    )
    group = Group.objects.get(name="reviewers")
    old, new = (
        PushDelivery.objects.create(
            subscription=phone, action=action, group=group, kind="new", delivered_at=ago(days)
        )
        for days in (31, 29)
    )
    assert "push_deliveries" not in retention.prune(now=ago(10), days=DAYS)  # none went
    assert retention.prune(days=DAYS)["push_deliveries"] == 1
    assert list(PushDelivery.objects.values_list("pk", flat=True)) == [new.pk]
