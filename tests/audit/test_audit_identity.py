"""Stable identities: renames keep the trail and the budget; admin changes are audited."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.contrib.auth.models import Group, Permission, User
from django.test import Client

from approvals.models import Agent, GroupNotificationSettings
from audit import log as audit_log
from audit.identity import acting_as
from audit.models import AuditEvent
from tests.factories import install_rules, refund


@pytest.fixture
def ops(db) -> tuple[User, Client]:
    user = User.objects.create_superuser("ops", "ops@example.com", "ops-password")
    client = Client()
    client.force_login(user)
    return user, client


def _events(name: str) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(event=name).order_by("seq"))


def _agent_form(agent: Agent, **changes) -> dict:
    keys = list(agent.keys.order_by("pk"))
    form = {
        "name": agent.name,
        "description": agent.description,
        "keys-TOTAL_FORMS": str(len(keys)),
        "keys-INITIAL_FORMS": str(len(keys)),
        "keys-MIN_NUM_FORMS": "0",
        "keys-MAX_NUM_FORMS": "1000",
    }
    if agent.is_active:
        form["is_active"] = "on"
    for index, key in enumerate(keys):
        form[f"keys-{index}-id"] = str(key.pk)
        form[f"keys-{index}-agent"] = str(agent.pk)
    form.update(changes)
    return form


def test_an_agent_renamed_in_admin_is_audited_with_its_stable_id(agent, ops):
    user, client = ops
    before = agent.client().post("/actions", refund(8400)).json()["action_id"]
    response = client.post(
        f"/admin/approvals/agent/{agent.agent.pk}/change/",
        _agent_form(agent.agent, name="refund-bot"),
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    (renamed,) = _events("agent.renamed")
    assert renamed.data == {
        "agent": "refund-bot",
        "agent_ref": f"agent:{agent.agent.pk}",
        "from": "support-bot",
        "to": "refund-bot",
    }
    assert (renamed.actor_id, renamed.actor_ref) == ("ops", f"user:{user.pk}")
    after = agent.client().post("/actions", refund(8400)).json()["action_id"]
    pushed = {e.action_id: e for e in _events("action.pushed") if e.action_id in (before, after)}
    assert pushed[before].actor_id == "support-bot"  # the name at the time
    assert pushed[after].actor_id == "refund-bot"
    assert pushed[before].actor_ref == pushed[after].actor_ref == f"agent:{agent.agent.pk}"
    assert audit_log.verify().ok


def test_renaming_an_agent_does_not_reset_its_budget(agent, db):
    install_rules()  # small refunds auto-approve, up to 50000 a day per agent
    for _ in range(10):
        assert agent.client().post("/actions", refund(5000)).json()["status"] == "approved"
    agent.agent.name = "fresh-name"
    agent.agent.save()
    assert agent.client().post("/actions", refund(5000)).json()["status"] == "pending"


def test_deactivation_and_webhook_secret_rotation_are_audited_without_the_secret(agent, ops):
    user, client = ops
    old_secret = agent.agent.webhook_secret
    form = _agent_form(agent.agent, _rotate_webhook_secret="1")  # the admin's rotate button
    form.pop("is_active")
    response = client.post(f"/admin/approvals/agent/{agent.agent.pk}/change/", form)
    assert response.status_code == 302, response.content.decode()[:2000]
    agent.agent.refresh_from_db()
    new_secret = agent.agent.webhook_secret
    assert new_secret != old_secret
    assert [e.data["agent_ref"] for e in _events("agent.deactivated")] == [
        f"agent:{agent.agent.pk}"
    ]
    (rotated,) = _events("agent.webhook_secret_rotated")
    assert rotated.actor_ref == f"user:{user.pk}"
    text = str([e.data for e in AuditEvent.objects.all()])
    assert old_secret not in text and new_secret not in text


def test_user_creation_deactivation_and_superuser_grant_are_audited(ops):
    admin, _ = ops
    with acting_as(admin):
        carol = User.objects.create_user("carol", password="carol-password")
        carol.is_superuser = True
        carol.save()
        carol.is_active = False
        carol.save()
        carol.username = "carol2"
        carol.save()
    created = [e for e in _events("user.created") if e.data["user"] == "carol"]
    assert len(created) == 1 and created[0].data["user_ref"] == f"user:{carol.pk}"
    for event in ("user.superuser_granted", "user.deactivated", "user.renamed"):
        (recorded,) = _events(event)
        assert recorded.data["user_ref"] == f"user:{carol.pk}", event
        assert (recorded.actor_id, recorded.actor_ref) == ("ops", f"user:{admin.pk}")
    assert _events("user.renamed")[0].data["from"] == "carol"


def test_a_login_is_not_a_change_of_the_user(rita):
    count = AuditEvent.objects.filter(event__startswith="user.").count()
    response = Client().post("/accounts/login/", {"username": "rita", "password": "rita-password"})
    assert response.status_code == 302
    assert AuditEvent.objects.filter(event__startswith="user.").count() == count


def test_superuser_grant_through_admin_names_the_admin(ops, rita):
    admin, client = ops
    response = client.post(
        f"/admin/auth/user/{rita.user.pk}/change/",
        {
            "username": "rita",
            "is_active": "on",
            "is_superuser": "on",
            "date_joined_0": "2026-01-01",
            "date_joined_1": "00:00:00",
            "groups": [g.pk for g in rita.user.groups.all()],
            "impri_tokens-TOTAL_FORMS": "0",  # the reviewer-token inline's management form
            "impri_tokens-INITIAL_FORMS": "0",
            "sso_identities-TOTAL_FORMS": "0",  # the SSO identities inline's
            "sso_identities-INITIAL_FORMS": "0",
        },
    )
    assert response.status_code == 302, response.content.decode()[:3000]
    (granted,) = _events("user.superuser_granted")
    assert granted.data["user_ref"] == f"user:{rita.user.pk}"
    assert (granted.actor_id, granted.actor_ref) == ("ops", f"user:{admin.pk}")


def test_group_membership_changes_are_audited_from_either_side(rita, sam):
    leads = Group.objects.create(name="support-leads")
    rita.user.groups.add(leads)
    leads.user_set.add(sam.user)
    rita.user.groups.remove(leads)
    leads.user_set.clear()
    changes = [
        (e.data["user"], e.data.get("added"), e.data.get("removed"))
        for e in _events("user.groups_changed")
        if "support-leads" in (e.data.get("added") or e.data.get("removed") or [])
    ]
    assert changes == [
        ("rita", ["support-leads"], None),
        ("sam", ["support-leads"], None),
        ("rita", None, ["support-leads"]),
        ("sam", None, ["support-leads"]),
    ]


def test_permission_grants_are_audited(rita):
    rita.user.user_permissions.add(Permission.objects.get(codename="audit_log"))
    (event,) = _events("user.permissions_changed")
    assert event.data["user_ref"] == f"user:{rita.user.pk}"
    assert "audit_log" in event.data["added"][0] or "audit log" in event.data["added"][0]


def test_notification_settings_are_audited_without_the_slack_url(ops):
    admin, _ = ops
    group = Group.objects.get_or_create(name=settings.IMPRI_DEFAULT_GROUP)[0]
    with acting_as(admin):
        config = GroupNotificationSettings.objects.create(group=group)
        config.slack_webhook_url = "https://hooks.slack.com/services/T000/B000/secret"
        config.reminder_every_s = 600
        config.save()
    first, second = _events("notifications.changed")
    assert first.data["group"] == settings.IMPRI_DEFAULT_GROUP
    assert second.data["changed"] == ["reminder_every_s", "slack_webhook_url"]
    assert second.data["reminder_every_s"] == 600
    assert second.data["slack_webhook_url_set"] is True
    assert "secret" not in str(second.data)
    assert second.actor_ref == f"user:{admin.pk}"


def test_a_key_issued_in_admin_names_the_admin_and_the_owner_by_id(agent, ops):
    admin, client = ops
    response = client.post(
        "/admin/approvals/agent/",
        {"action": "issue_key", "_selected_action": [agent.agent.pk]},
    )
    assert response.status_code == 302
    issued = [e for e in _events("key.created") if e.actor_id == "admin:ops"]
    assert len(issued) == 1
    assert issued[0].actor_ref == f"user:{admin.pk}"
    assert issued[0].data["owner_ref"] == f"agent:{agent.agent.pk}"


def test_a_login_names_the_stable_user(rita):
    Client().post("/accounts/login/", {"username": "rita", "password": "rita-password"})
    (login,) = _events("reviewer.login")
    assert login.actor_ref == f"user:{rita.user.pk}"
