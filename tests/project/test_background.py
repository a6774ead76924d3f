"""Background sweeps, time-controlled: escalation, reminders, stale approvals, and the outbox rows."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.contrib.auth.models import Group
from django.utils import timezone

from approvals import services
from approvals.models import (
    Action,
    ActionStatus,
    GroupNotificationSettings,
    Notification,
    WebhookDelivery,
)
from audit.models import AuditEvent
from tests.conftest import make_reviewer
from tests.factories import install_rules, make_action, refund

# Service tests: no test-case transaction around the code (tests/core/test_service_transactions.py).
pytestmark = pytest.mark.django_db(transaction=True)


ESCALATING = """
rules:
  - name: payments
    kind: payment.*
    then: review
    group: support-leads
    escalate_after_s: 600
    escalate_to: finance-leads
"""


def at(start, seconds: float):
    return time_machine.travel(start + timedelta(seconds=seconds), tick=False)


@pytest.fixture
def t0():
    return timezone.now().replace(microsecond=0)


def reviewer_with_email(username: str, group: str):
    persona = make_reviewer(username, group)
    persona.user.email = f"{username}@example.com"
    persona.user.save()
    return persona


class TestEscalation:
    def test_an_undecided_action_moves_to_the_escalation_group_once(self, agent, t0):
        install_rules(ESCALATING)
        lead = make_reviewer("lead", "support-leads")
        cfo = reviewer_with_email("cfo", "finance-leads")
        with at(t0, 0):
            action = make_action(agent.agent, payload=refund(20000)["payload"])
        with at(t0, 599):
            assert services.escalate_due() == 0
        with at(t0, 601):
            assert services.escalate_due() == 1
            assert services.escalate_due() == 0  # idempotent
        action.refresh_from_db()
        assert action.review_group.name == "finance-leads"
        assert action.escalate_at is None
        event = AuditEvent.objects.get(action_id=action.pk, event="action.escalated")
        assert event.data == {"from": "support-leads", "to": "finance-leads", "rule": "payments"}
        assert (
            Notification.objects.filter(
                action=action, kind="escalated", group__name="finance-leads"
            ).count()
            == 1
        )
        assert (
            lead.client().post(f"/actions/{action.pk}/approve").status_code == 404
        )  # not theirs now
        assert cfo.client().post(f"/actions/{action.pk}/approve").status_code == 200

    def test_a_decided_action_is_not_escalated(self, agent, t0):
        install_rules(ESCALATING)
        lead = make_reviewer("lead", "support-leads")
        with at(t0, 0):
            action = make_action(agent.agent, payload=refund(20000)["payload"])
        with at(t0, 10):
            services.decide(action.pk, by=lead.user, verdict="approve")
        with at(t0, 601):
            assert services.escalate_due() == 0
        assert not AuditEvent.objects.filter(event="action.escalated").exists()

    def test_escalation_keys_must_come_together(self, db):
        from rules import engine

        with pytest.raises(engine.RuleError, match="rule 'x': escalate_to"):
            engine.parse_rule({"name": "x", "then": "review", "escalate_after_s": 60})


class TestReminders:
    def test_the_group_is_reminded_every_interval_while_undecided(self, agent, t0):
        reviewer_with_email("rita", "reviewers")
        GroupNotificationSettings.objects.create(
            group=Group.objects.get(name="reviewers"), reminder_every_s=600
        )
        with at(t0, 0):
            action = make_action(agent.agent)
        with at(t0, 599):
            assert services.remind_due() == 0
        with at(t0, 601):
            assert services.remind_due() == 1
            assert services.remind_due() == 0
        with at(t0, 1000):
            assert services.remind_due() == 0
        with at(t0, 1202):
            assert services.remind_due() == 1
        assert Notification.objects.filter(action=action, kind="reminder").count() == 2

    def test_groups_without_reminders_get_none(self, agent, t0):
        reviewer_with_email("rita", "reviewers")
        with at(t0, 0):
            make_action(agent.agent)
        with at(t0, 86000):
            assert services.remind_due() == 0


class TestStaleApprovals:
    def test_an_approval_without_a_result_is_flagged_once(self, agent, rita, t0, settings):
        settings.IMPRI_REPORT_DEADLINE_S = 3600
        reviewer_with_email("sam", "reviewers")
        with at(t0, 0):
            action = make_action(agent.agent)
            services.decide(action.pk, by=rita.user, verdict="approve")
        with at(t0, 3599):
            assert services.flag_stale() == 0
        with at(t0, 3601):
            assert services.flag_stale() == 1
            assert services.flag_stale() == 0
        action.refresh_from_db()
        assert action.stale_flagged_at is not None
        assert AuditEvent.objects.filter(action_id=action.pk, event="action.stale").count() == 1
        assert Notification.objects.filter(action=action, kind="stale").count() == 1
        # Reporting late still works and is recorded.
        services.report_result(
            action.pk, agent=agent.agent, status="executed", detail={"transaction_id": "re_late"}
        )
        action.refresh_from_db()
        assert action.status == ActionStatus.EXECUTED

    def test_a_reported_action_is_never_stale(self, agent, rita, t0, settings):
        settings.IMPRI_REPORT_DEADLINE_S = 60
        with at(t0, 0):
            action = make_action(agent.agent)
            services.decide(action.pk, by=rita.user, verdict="approve")
            services.report_result(action.pk, agent=agent.agent, status="executed")
        with at(t0, 61):
            assert services.flag_stale() == 0


class TestNotificationsOnArrival:
    def test_a_new_action_notifies_its_group_on_each_channel(self, agent):
        reviewer_with_email("rita", "reviewers")
        GroupNotificationSettings.objects.create(
            group=Group.objects.get(name="reviewers"),
            slack_webhook_url="https://hooks.slack.example/T/B/x",
        )
        action = make_action(agent.agent)
        assert sorted(
            Notification.objects.filter(action=action, kind="new").values_list("channel", flat=True)
        ) == [
            "email",
            "slack",
        ]

    def test_nobody_to_tell_means_no_rows(self, agent, rita):
        # rita has no email address and the group has no Slack webhook
        make_action(agent.agent)
        assert not Notification.objects.exists()

    def test_email_can_be_switched_off_for_a_group(self, agent):
        reviewer_with_email("rita", "reviewers")
        GroupNotificationSettings.objects.create(
            group=Group.objects.get(name="reviewers"), email_enabled=False
        )
        make_action(agent.agent)
        assert not Notification.objects.exists()

    def test_an_auto_decided_action_notifies_nobody(self, agent):
        reviewer_with_email("rita", "reviewers")
        install_rules("rules: [{name: all, kind: '*', then: auto_approve}]")
        make_action(agent.agent)
        assert not Notification.objects.exists()


class TestWebhookOutbox:
    HOOK = "https://agent.example.com/impri-hook"

    @pytest.fixture(autouse=True)
    def _public_hook(self, hosts):
        hosts["agent.example.com"] = ["93.184.215.14"]  # public; nothing is sent in these tests

    def test_a_decision_writes_one_delivery_with_the_await_body(self, agent, rita):
        action = make_action(agent.agent, callback_url=self.HOOK)
        assert not WebhookDelivery.objects.exists()  # nothing to say while pending
        services.decide(
            action.pk, by=rita.user, verdict="approve", edits={"payload.amount_cents": 5000}
        )
        delivery = WebhookDelivery.objects.get()
        assert (delivery.url, delivery.event) == (self.HOOK, "action.approved")
        assert delivery.id.startswith("msg_")
        assert delivery.body == agent.client().get(f"/actions/{action.pk}/decision").json()

    @pytest.mark.parametrize("how", ["reject", "cancel", "expire", "rule"])
    def test_every_way_of_settling_is_announced(self, agent, rita, how, t0):
        if how == "rule":
            install_rules("rules: [{name: all, kind: '*', then: auto_reject, reason: closed}]")
        with at(t0, 0):
            action = make_action(agent.agent, callback_url=self.HOOK, expires_in_s=60)
        with at(t0, 1 if how != "expire" else 61):
            if how == "reject":
                services.decide(action.pk, by=rita.user, verdict="reject", note="no")
            elif how == "cancel":
                services.cancel_action(action.pk, agent=agent.agent)
            elif how == "expire":
                services.expire_due()
        expected = {
            "reject": "rejected",
            "cancel": "cancelled",
            "expire": "expired",
            "rule": "rejected",
        }[how]
        delivery = WebhookDelivery.objects.get()
        assert delivery.body["status"] == expected
        assert delivery.event == f"action.{expected}"

    def test_without_a_callback_url_there_is_nothing_to_deliver(self, agent, rita):
        action = make_action(agent.agent)
        services.decide(action.pk, by=rita.user, verdict="approve")
        assert not WebhookDelivery.objects.exists()

    def test_a_callback_url_must_be_http(self, agent):
        response = agent.client().post("/actions", refund(100, callback_url="file:///etc/passwd"))
        assert response.status_code == 422
        assert response.json()["field"] == "callback_url"
        assert not Action.objects.exists()

    def test_every_agent_has_its_own_secret(self, agent, other_agent):
        assert agent.agent.webhook_secret.startswith("whsec_")
        assert agent.agent.webhook_secret != other_agent.agent.webhook_secret


def test_a_stale_approval_is_flagged_in_the_inbox(agent, rita, settings):
    from django.test import Client

    settings.IMPRI_REPORT_DEADLINE_S = 60
    action = make_action(agent.agent)
    services.decide(action.pk, by=rita.user, verdict="approve")
    browser = Client()
    browser.force_login(rita.user)
    assert "No result reported" not in browser.get(f"/inbox/actions/{action.pk}").content.decode()
    with time_machine.travel(timezone.now() + timedelta(seconds=61), tick=False):
        assert services.flag_stale() == 1
    assert "No result reported" in browser.get(f"/inbox/actions/{action.pk}").content.decode()
    assert "no result reported" in browser.get("/inbox/decided/").content.decode()
    services.report_result(action.pk, agent=agent.agent, status="executed")
    assert "No result reported" not in browser.get(f"/inbox/actions/{action.pk}").content.decode()
