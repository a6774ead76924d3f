"""createagent and createreviewer run twice change nothing unasked; agent names are slugs at every door."""

from __future__ import annotations

from io import StringIO

import pytest
from django.contrib.auth.models import Group, User
from django.core.management import CommandError, call_command
from django.test import Client

from approvals.models import Agent
from tests.conftest import ApiClient


def run(*args) -> str:
    out = StringIO()
    call_command(*args, stdout=out, stderr=StringIO())
    return out.getvalue()


def key_of(output: str) -> str:
    return output.strip().splitlines()[-1].split()[-1]


# --- createagent ----------------------------------------------------------------------------


def test_createagent_on_an_existing_name_changes_nothing_and_says_how_to_rotate(db):
    first = key_of(run("createagent", "support-bot"))
    with pytest.raises(CommandError) as refused:
        run("createagent", "support-bot")
    assert str(refused.value) == (
        "an agent named 'support-bot' already exists: nothing changed (--rotate issues a new "
        "key and revokes the old ones; --new-key adds one)"
    )
    assert Agent.objects.get(name="support-bot").keys.count() == 1
    assert ApiClient(first).get("/actions").status_code == 200


def test_rotate_issues_a_working_key_and_revokes_the_old_ones(db):
    old = key_of(run("createagent", "support-bot"))
    also_old = key_of(run("createagent", "support-bot", "--new-key"))
    new = key_of(run("createagent", "support-bot", "--rotate"))
    assert new.startswith("imp_a_") and new not in (old, also_old)
    assert ApiClient(new).get("/actions").status_code == 200
    assert ApiClient(old).get("/actions").status_code == 401
    assert ApiClient(also_old).get("/actions").status_code == 401
    assert Agent.objects.get(name="support-bot").keys.active().count() == 1


def test_rotate_needs_an_existing_agent(db):
    with pytest.raises(
        CommandError, match=r"no agent named 'ghost' \(create it: impri createagent ghost\)"
    ):
        run("createagent", "ghost", "--rotate")
    assert not Agent.objects.exists()


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("", "agent name is required: letters, digits, '-' and '_' (e.g. support-bot)"),
        (
            "bad name!",
            "agent name 'bad name!' is not a slug: use only letters, digits, '-' and '_' (e.g. support-bot)",
        ),
        ("bot\x1b[2J", "is not a slug"),
        ("é-bot", "is not a slug"),
        ("a" * 101, "agent name is 101 characters long: at most 100"),
    ],
)
def test_createagent_refuses_a_name_that_is_not_a_short_slug(db, name, message):
    with pytest.raises(CommandError) as refused:
        run("createagent", name)
    assert message in str(refused.value)
    assert not Agent.objects.exists()


def test_a_slug_of_100_characters_is_a_name(db):
    run("createagent", "A_" + "b-" * 49)
    assert Agent.objects.get().name == "A_" + "b-" * 49


def agent_form(name: str, description: str = "") -> dict:
    """The admin's agent form as a browser posts it (the keys inline shows no rows to edit)."""
    management = {"keys-TOTAL_FORMS": "0", "keys-INITIAL_FORMS": "0"}
    return {"name": name, "description": description, "is_active": "on", **management}


def test_admin_refuses_a_bad_agent_name_naming_the_field(db):
    client = Client()
    client.force_login(User.objects.create_superuser("root", password="root-password"))
    page = client.post("/admin/approvals/agent/add/", agent_form("bad name!"))
    assert page.status_code == 200  # the form again, with the error beside the field
    assert page.context["adminform"].form.errors["name"] == [
        "The name 'bad name!' is not a slug: use only letters, digits, '-' and '_' (e.g. support-bot)"
    ]
    assert not Agent.objects.exists()
    done = client.post("/admin/approvals/agent/add/", agent_form("billing-bot"))
    assert done.status_code == 302 and Agent.objects.get().name == "billing-bot"


def test_admin_keeps_a_name_from_before_the_check(db):
    legacy = Agent.objects.create(name="Old Bot (2024)")
    client = Client()
    client.force_login(User.objects.create_superuser("root", password="root-password"))
    saved = client.post(
        f"/admin/approvals/agent/{legacy.pk}/change/",
        agent_form("Old Bot (2024)", description="renamed never"),
    )
    assert saved.status_code == 302, saved.context["adminform"].form.errors
    legacy.refresh_from_db()
    assert legacy.description == "renamed never"


# --- createreviewer ---------------------------------------------------------------------------


@pytest.fixture
def rita_exists(db) -> User:
    rita = User.objects.create_user("rita", password="rita's own long phrase")
    rita.groups.add(Group.objects.get_or_create(name="finance")[0])
    return rita


def test_createreviewer_on_an_existing_user_changes_nothing(rita_exists, monkeypatch):
    monkeypatch.setenv("IMPRI_REVIEWER_PASSWORD", "somebody else's choice 1")
    with pytest.raises(CommandError) as refused:
        run("createreviewer", "rita", "--group", "reviewers")
    assert str(refused.value) == (
        "a user named 'rita' already exists: nothing changed (--reset-password sets a new "
        "password; groups are changed in admin)"
    )
    rita_exists.refresh_from_db()
    assert rita_exists.check_password("rita's own long phrase")
    assert [g.name for g in rita_exists.groups.all()] == ["finance"]


def test_reset_password_sets_the_new_one(rita_exists, monkeypatch):
    monkeypatch.setenv("IMPRI_REVIEWER_PASSWORD", "a new and long phrase 2")
    assert "Set a new password for rita" in run("createreviewer", "rita", "--reset-password")
    rita_exists.refresh_from_db()
    assert rita_exists.check_password("a new and long phrase 2")


def test_reset_password_without_a_password_is_refused(rita_exists, monkeypatch):
    monkeypatch.delenv("IMPRI_REVIEWER_PASSWORD", raising=False)
    with pytest.raises(CommandError, match="--reset-password needs the new password"):
        run("createreviewer", "rita", "--reset-password")
    rita_exists.refresh_from_db()
    assert rita_exists.check_password("rita's own long phrase")
