"""Requester and approver differ: a person who owns an agent never approves its actions."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from approvals.models import ActionStatus
from audit.models import AuditEvent
from tests.factories import make_action


@pytest.fixture
def action(agent, rita):
    agent.agent.owners.add(rita.user)
    return make_action(agent.agent)


@pytest.mark.parametrize("body", [{}, {"edits": {"payload.amount_cents": 5000}}])
def test_an_owner_cannot_approve_their_agents_action(action, rita, body):
    response = rita.client().post(f"/actions/{action.pk}/approve", body)
    assert response.status_code == 403, response.content
    assert "you own the agent 'support-bot'" in response.json()["detail"]
    action.refresh_from_db()
    assert (action.status, action.payload["amount_cents"]) == (ActionStatus.PENDING, 8400)
    assert not action.reviews.exists()
    assert not AuditEvent.objects.filter(action_id=action.pk, event__startswith="action.a").exists()


def test_an_owner_may_reject(action, rita):
    response = rita.client().post(f"/actions/{action.pk}/reject", {"note": "not like this"})
    assert response.json()["status"] == "rejected"


def test_a_superuser_owner_cannot_approve_either(agent, db):
    from identity import keys
    from tests.conftest import Persona

    boss = User.objects.create_superuser("boss", password="boss-password")
    agent.agent.owners.add(boss)
    _, raw = keys.create_reviewer_token(boss)
    action = make_action(agent.agent)
    response = Persona(key=raw, user=boss).client().post(f"/actions/{action.pk}/approve")
    assert response.status_code == 403


def test_another_reviewer_approves(action, sam):
    assert sam.client().post(f"/actions/{action.pk}/approve").json()["status"] == "approved"


def test_owning_another_agent_changes_nothing(agent, other_agent, rita):
    other_agent.agent.owners.add(rita.user)
    action = make_action(agent.agent)
    assert rita.client().post(f"/actions/{action.pk}/approve").json()["status"] == "approved"


def test_the_inbox_hides_the_approve_from_the_owner_and_refuses_it(action, rita):
    client = Client()
    client.force_login(rita.user)
    page = client.get(f"/inbox/actions/{action.pk}").content.decode()
    assert 'id="owner-note"' in page
    assert "decide-approve" not in page
    assert "decide-reject" in page
    response = client.post(
        f"/inbox/actions/{action.pk}/decide",
        {"approve-verdict": "approve", "approve-payload.amount_cents": "8400"},
    )
    assert response.status_code == 403
    assert "you own the agent" in response.content.decode()
    action.refresh_from_db()
    assert action.status == ActionStatus.PENDING


def test_admin_edits_owners(agent, rita, db):
    admin = User.objects.create_superuser("root", password="root-password")
    client = Client()
    client.force_login(admin)
    page = client.get(f"/admin/approvals/agent/{agent.agent.pk}/change/").content.decode()
    assert 'name="owners"' in page
    assert f'<option value="{rita.user.pk}">rita</option>' in page


def test_admin_sets_owners_and_the_change_is_audited(agent, rita, sam, db):
    admin = User.objects.create_superuser("root", password="root-password")
    client = Client()
    client.force_login(admin)
    bot = agent.agent
    created = timezone.localtime(bot.created_at)
    response = client.post(
        f"/admin/approvals/agent/{bot.pk}/change/",
        {
            "name": bot.name,
            "description": "",
            "is_active": "on",
            "created_at_0": created.strftime("%Y-%m-%d"),
            "created_at_1": created.strftime("%H:%M:%S"),
            "webhook_secret": bot.webhook_secret,
            "owners": [rita.user.pk, sam.user.pk],
            "keys-TOTAL_FORMS": "1",
            "keys-INITIAL_FORMS": "1",
            "keys-MIN_NUM_FORMS": "0",
            "keys-MAX_NUM_FORMS": "1000",
            "keys-0-id": bot.keys.get().pk,
            "keys-0-agent": bot.pk,
        },
    )
    assert response.status_code == 302, response.content.decode()[:3000]
    assert set(bot.owners.values_list("username", flat=True)) == {"rita", "sam"}
    event = AuditEvent.objects.get(event="agent.owners_changed")
    assert (event.actor_id, event.data["agent"], event.data["added"]) == (
        "root",
        "support-bot",
        ["rita", "sam"],
    )
    action = make_action(bot)
    assert rita.client().post(f"/actions/{action.pk}/approve").status_code == 403
