"""Agent keys and reviewer tokens: shown once, stored hashed, revocable, last use kept."""

from __future__ import annotations

from io import StringIO

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command

from approvals import keys
from approvals.models import Agent, ApiKey, hash_key
from audit.models import AuditEvent
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
