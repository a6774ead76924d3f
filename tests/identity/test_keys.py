"""Agent keys and reviewer tokens: shown once, stored hashed, revocable, last use kept."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.utils import timezone

from approvals.models import Agent, ApiKey, hash_key
from audit.models import AuditEvent
from identity import keys
from tests.conftest import ApiClient


def run(*args) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def last_word(output: str) -> str:
    return output.strip().splitlines()[-1].split()[-1]


def test_createagent_prints_a_key_that_works_and_is_stored_hashed(db):
    raw = last_word(run("createagent", "support-bot"))
    assert raw.startswith("imp_a_") and len(raw) == 46
    key = ApiKey.objects.get()
    assert key.key_hash == hash_key(raw)
    assert raw not in {key.prefix, key.key_hash, key.label}
    assert raw.startswith(key.prefix)
    assert ApiClient(raw).get("/actions").status_code == 200
    assert AuditEvent.objects.filter(event="key.created", data__prefix=key.prefix).exists()


def test_createagent_refuses_a_duplicate_name_and_can_issue_another_key(db):
    first = last_word(run("createagent", "bot"))
    with pytest.raises(CommandError, match="already exists"):
        run("createagent", "bot")
    second = last_word(run("createagent", "bot", "--new-key"))
    assert first != second
    assert Agent.objects.get(name="bot").keys.count() == 2


def test_createreviewer_joins_the_default_group_unless_told_otherwise(db):
    run("createreviewer", "rita", "--password", "pw-rita-long-1")
    run("createreviewer", "lee", "--group", "finance", "--group", "support-leads")
    rita = User.objects.get(username="rita")
    assert [g.name for g in rita.groups.all()] == ["reviewers"]
    assert rita.check_password("pw-rita-long-1")
    assert sorted(g.name for g in User.objects.get(username="lee").groups.all()) == [
        "finance",
        "support-leads",
    ]
    assert not User.objects.get(username="lee").has_usable_password()


def test_token_prints_a_reviewer_token(db):
    run("createreviewer", "rita")
    raw = last_word(run("token", "rita"))
    assert raw.startswith("imp_r_")
    assert ApiClient(raw).get("/actions").status_code == 200


def test_token_for_an_unknown_user_fails_clearly(db):
    with pytest.raises(CommandError, match="no user named 'ghost'"):
        run("token", "ghost")


def test_last_used_at_is_kept(agent):
    key = agent.agent.keys.get()
    assert key.last_used_at is None
    agent.client().get("/actions")
    key.refresh_from_db()
    assert key.last_used_at is not None


def test_revocation_is_audited_and_final(agent):
    key = agent.agent.keys.get()
    keys.revoke_key(key, by="admin:ops")
    keys.revoke_key(key, by="admin:ops")  # a second revoke changes nothing
    assert keys.authenticate(agent.key) is None
    assert AuditEvent.objects.filter(event="key.revoked").count() == 1


def test_a_reviewer_token_is_not_an_agent_key(rita):
    principal = keys.authenticate(rita.key)
    assert principal.agent is None and principal.user == rita.user


# --- Admin: keys and webhook secrets are shown once, never from a cookie ------------------


@pytest.fixture
def ops_client(db):
    from django.test import Client

    user = User.objects.create_superuser("ops", "ops@example.com", "ops-password-long")
    client = Client()
    client.force_login(user)
    return client


def test_a_new_key_is_shown_once_from_the_session_not_the_messages_cookie(ops_client):
    agent, _ = keys.create_agent("bot")
    response = ops_client.post(
        "/admin/approvals/agent/",
        {"action": "issue_key", "_selected_action": [agent.pk]},
    )
    assert response.status_code == 302
    assert "messages" not in response.cookies, "no message travels in a cookie"
    shown = ops_client.get("/admin/approvals/agent/").content.decode()
    raw = shown.split("(shown once): ")[1].split("<")[0].strip()
    assert keys.authenticate(raw).agent == agent
    assert raw not in ops_client.get("/admin/approvals/agent/").content.decode(), "once"


def test_the_webhook_secret_is_never_on_the_agent_page_and_rotates_with_a_button(ops_client):
    agent, _ = keys.create_agent("bot")
    old = agent.webhook_secret
    page = ops_client.get(f"/admin/approvals/agent/{agent.pk}/change/").content.decode()
    assert old not in page
    assert 'name="_rotate_webhook_secret"' in page
    response = ops_client.post(
        f"/admin/approvals/agent/{agent.pk}/change/",
        {
            "name": "bot",
            "description": "",
            "is_active": "on",
            "created_at_0": "2026-01-01",
            "created_at_1": "00:00:00",
            "keys-TOTAL_FORMS": "0",
            "keys-INITIAL_FORMS": "0",
            "_rotate_webhook_secret": "1",
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    agent.refresh_from_db()
    assert agent.webhook_secret != old and agent.webhook_secret.startswith("whsec_")
    shown = ops_client.get("/admin/approvals/agent/").content.decode()
    assert agent.webhook_secret in shown
    assert (
        agent.webhook_secret
        not in ops_client.get(f"/admin/approvals/agent/{agent.pk}/change/").content.decode()
    )
    assert AuditEvent.objects.filter(event="agent.webhook_secret_rotated").count() == 1


def test_saving_an_agent_without_the_button_keeps_the_secret(ops_client):
    agent, _ = keys.create_agent("bot")
    old = agent.webhook_secret
    ops_client.post(
        f"/admin/approvals/agent/{agent.pk}/change/",
        {
            "name": "bot",
            "description": "renamed",
            "is_active": "on",
            "created_at_0": "2026-01-01",
            "created_at_1": "00:00:00",
            "keys-TOTAL_FORMS": "0",
            "keys-INITIAL_FORMS": "0",
        },
    )
    agent.refresh_from_db()
    assert agent.description == "renamed" and agent.webhook_secret == old


def _fields(instance) -> dict:
    return {f.attname: getattr(instance, f.attname) for f in type(instance)._meta.concrete_fields}


def test_the_key_check_reads_what_the_orm_would_for_both_kinds_of_key(db):
    """``authenticate`` reads key, agent and user in plain SQL: the same values, typed as the ORM's."""
    agent, agent_raw = keys.create_agent(name="plain-sql-bot", description="ä ✓")
    rita = User.objects.create_user("rita-sql", password="pw-rita-long-1", is_staff=True)
    _, reviewer_raw = keys.create_reviewer_token(rita, is_service=True)
    # Used seconds ago, so the check does not write a newer last use under the comparison.
    ApiKey.objects.update(last_used_at=timezone.now() - timedelta(seconds=5))
    for raw in (agent_raw, reviewer_raw):
        principal = keys.authenticate(raw)
        orm = ApiKey.objects.select_related("agent", "user").get(key_hash=hash_key(raw))
        assert _fields(principal.key) == _fields(orm)
        assert principal.key.last_used_at.tzinfo is not None
        owner = principal.agent or principal.user
        assert _fields(owner) == _fields(orm.agent or orm.user)
        assert type(owner.is_active) is bool and not principal.key._state.adding
    assert keys.authenticate(agent_raw).agent.description == "ä ✓"
    assert keys.authenticate(reviewer_raw).key.is_service is True
    assert keys.authenticate(reviewer_raw).user.is_staff is True
    keys.revoke_key(ApiKey.objects.get(agent=agent))
    assert keys.authenticate(agent_raw) is None
    assert keys.authenticate(agent_raw[:-1] + "x") is None


def test_random_ids_and_secrets_use_every_character_at_every_position():
    """One CSPRNG draw per id, spread over the whole alphabet: no position is narrowed.

    With 4,000 draws a fair position misses one of the 62 characters with
    probability about 62 · (61/62)^4000, i.e. never.
    """
    from approvals.models import BASE62, random_base62

    draws = [random_base62(24) for _ in range(4000)]
    assert all(len(d) == 24 and set(d) <= set(BASE62) for d in draws)
    for position in range(24):
        assert {d[position] for d in draws} == set(BASE62), position
    assert len(set(draws)) == len(draws)
