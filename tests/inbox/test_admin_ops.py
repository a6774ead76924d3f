"""The "Impri administration" site: an index for operators, rules as YAML, reviewer tokens."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client
from django.utils import timezone

from approvals import services
from approvals.models import Action, Agent, ApiKey, WebhookDelivery
from audit import verification
from audit.models import AuditEvent, VerificationRun
from rules.models import Rule, RuleSet
from tests.conftest import ApiClient
from tests.factories import install_rules, make_action


@pytest.fixture(autouse=True)
def _public_callback_host(hosts):
    hosts["agent.example.com"] = ["93.184.215.14"]  # a public address, never contacted here


pytestmark = pytest.mark.django_db


@pytest.fixture
def olivia(db) -> Client:
    """An operator: a superuser in admin."""
    user = User.objects.create_superuser("olivia", "olivia@example.com", "olivia-password")
    client = Client()
    client.force_login(user)
    return client


def test_the_index_shows_health_queue_outbox_and_chain(olivia, agent):
    make_action(agent.agent)
    make_action(agent.agent)
    overdue = make_action(agent.agent)
    Action.objects.filter(pk=overdue.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    hooked = make_action(agent.agent, callback_url="https://agent.example.com/hook")
    services.cancel_action(hooked.pk, agent=agent.agent)
    WebhookDelivery.objects.update(next_attempt_at=timezone.now() - timedelta(seconds=90))

    html = olivia.get("/admin/").content.decode()

    assert "<title>Operations | Impri administration</title>" in html
    assert "Impri administration" in html
    assert '<td data-ops="layer">ok</td>' in html
    assert '<td data-ops="pending">2</td>' in html
    assert '<td data-ops="overdue">1</td>' in html
    assert '<tr data-lane="webhooks"><td>Webhooks</td><td>1</td>' in html
    assert '<td data-ops="chain">never verified</td>' in html
    assert f'<td data-ops="chain-events">{AuditEvent.objects.count()}</td>' in html


def test_verify_now_records_the_result_that_the_index_shows(olivia, agent):
    make_action(agent.agent)
    response = olivia.post("/admin/verify-chain/", follow=True)
    assert "Audit chain intact" in response.content.decode()
    verified = verification.latest()
    assert verified.kind == VerificationRun.Kind.FULL and verified.requested_by == "admin:olivia"
    assert verified.ok and verified.checked == AuditEvent.objects.count()
    assert "intact (" in olivia.get("/admin/").content.decode()


def test_staff_who_are_not_superusers_cannot_run_a_verify(db, agent):
    staff = User.objects.create_user("stan", password="x", is_staff=True)
    client = Client()
    client.force_login(staff)
    client.post("/admin/verify-chain/")
    assert not VerificationRun.objects.exists()


def test_models_have_their_proper_names(olivia):
    html = olivia.get("/admin/").content.decode()
    assert "Webhook deliveries" in html
    assert "API keys" in html
    assert "Webhook deliverys" not in html and "Api keys" not in html


@pytest.mark.parametrize(
    ("url", "field"),
    [
        ("/admin/approvals/agent/{agent}/change/", "created_at"),
        ("/admin/approvals/apikey/{key}/change/", "created_at"),
        ("/admin/approvals/apikey/{key}/change/", "last_used_at"),
        ("/admin/auth/user/{user}/change/", "date_joined"),
        ("/admin/auth/user/{user}/change/", "last_login"),
        ("/admin/rules/rule/{rule}/change/", "updated_at"),
    ],
)
def test_timestamps_are_read_only(olivia, agent, rita, url, field):
    install_rules()
    ids = {
        "agent": agent.agent.pk,
        "key": ApiKey.objects.filter(agent=agent.agent).first().pk,
        "user": rita.user.pk,
        "rule": Rule.objects.first().pk,
    }
    html = olivia.get(url.format(**ids)).content.decode()
    assert f'name="{field}' not in html  # no input of that name (date and time parts included)
    assert f"field-{field}" in html  # but it is shown


# --- Rules as YAML ----------------------------------------------------------------------


def rule_post(**overrides) -> dict:
    return {
        "position": "10",
        "name": "small refunds",
        "enabled": "on",
        "definition": "kind: payment.refund\nwhen: {path: payload.amount_cents, lte: 5000}\nthen: auto_approve\n",
        **overrides,
    }


def test_a_rule_is_shown_and_saved_as_yaml(olivia):
    install_rules()
    rule = Rule.objects.get(name="absurd refunds")
    html = olivia.get(f"/admin/rules/rule/{rule.pk}/change/").content.decode()
    assert "then: auto_reject" in html and "reason: above the hard cap" in html
    version = RuleSet.objects.get().version
    response = olivia.post(
        f"/admin/rules/rule/{rule.pk}/change/",
        rule_post(
            name="absurd refunds",
            definition="kind: payment.refund\nthen: auto_reject\nreason: never by an agent\n",
        ),
    )
    assert response.status_code == 302
    rule.refresh_from_db()
    assert rule.definition == {
        "kind": "payment.refund",
        "then": "auto_reject",
        "reason": "never by an agent",
    }
    assert RuleSet.objects.get().version == version + 1


@pytest.mark.parametrize(
    ("definition", "message"),
    [
        ("kind: [unclosed", "not YAML"),
        ("- a list", "must be a YAML mapping"),
        ("kind: payment.refund\nthen: explode\n", "then"),
    ],
)
def test_a_bad_rule_is_refused_with_a_message_and_nothing_saved(olivia, definition, message):
    response = olivia.post("/admin/rules/rule/add/", rule_post(definition=definition))
    assert response.status_code == 200
    assert message in response.content.decode()
    assert not Rule.objects.exists()


NEW_RULES = """
rules:
  - name: small refunds
    kind: payment.refund
    when: {path: payload.amount_cents, lte: 2500}
    then: auto_approve
  - name: emails
    kind: email.*
    then: review
    group: comms
"""


def test_an_unknown_group_is_refused_in_the_preview(olivia):
    response = olivia.post("/admin/rules/rule/yaml/", {"rules_yaml": NEW_RULES, "preview": "1"})
    assert response.status_code == 200
    assert "no reviewer group is named &#x27;comms&#x27;" in response.content.decode()
    assert "Save these rules" not in response.content.decode()


def test_the_rule_set_is_previewed_before_it_is_saved(olivia, agent):
    Group.objects.get_or_create(name="comms")
    install_rules()
    make_action(agent.agent, payload={"amount_cents": 3000, "currency": "USD"})
    version = RuleSet.objects.get().version
    response = olivia.post("/admin/rules/rule/yaml/", {"rules_yaml": NEW_RULES, "preview": "1"})
    html = response.content.decode()
    assert "Added: emails" in html
    assert "Removed: absurd refunds, everything else in payments" in html
    assert "Changed: small refunds" in html
    assert "-      lte: 5000" in html and "+    lte: 2500" in html
    assert "+- name: emails" in html
    # The past week replayed: the 30.00 refund was auto-approved, now it goes to review.
    before, after = html.split("your rules</h3>")
    assert "auto_approve: 1" in before.split("current rules</h3>")[1]
    assert "auto_approve: 0" in after and "review:       1" in after
    assert "Save these rules" in html
    assert RuleSet.objects.get().version == version  # a preview saves nothing
    assert Rule.objects.count() == 3

    response = olivia.post(
        "/admin/rules/rule/yaml/",
        {"rules_yaml": NEW_RULES, "save": "1", "previewed_version": str(version)},
    )
    assert response.status_code == 302
    assert list(Rule.objects.values_list("name", flat=True)) == ["small refunds", "emails"]
    assert RuleSet.objects.get().version == version + 1


def test_a_save_after_the_rules_changed_elsewhere_is_refused(olivia):
    Group.objects.get_or_create(name="comms")
    install_rules()
    stale = RuleSet.objects.get().version
    install_rules()  # someone else imports meanwhile
    response = olivia.post(
        "/admin/rules/rule/yaml/",
        {"rules_yaml": NEW_RULES, "save": "1", "previewed_version": str(stale)},
    )
    assert response.status_code == 200
    assert "The rules changed since your preview" in response.content.decode()
    assert Rule.objects.count() == 3


def test_invalid_yaml_rules_are_refused_naming_the_problem(olivia):
    install_rules()
    bad = "rules:\n  - name: x\n    kind: payment.refund\n    then: review\n    approvals_required: 0\n"
    response = olivia.post("/admin/rules/rule/yaml/", {"rules_yaml": bad, "save": "1"})
    html = response.content.decode()
    assert "rules_yaml:" in html and "approvals_required" in html
    assert Rule.objects.count() == 3


# --- Reviewer tokens ----------------------------------------------------------------------


def test_a_reviewer_token_is_issued_once_in_admin_and_revoked_there(olivia, rita):
    response = olivia.post(
        "/admin/auth/user/",
        {"action": "issue_reviewer_token", "_selected_action": [str(rita.user.pk)]},
    )
    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"]
    html = response.content.decode()
    token = html.split("<code data-token>")[1].split("</code>")[0]
    assert token.startswith("imp_r_")
    key = ApiKey.objects.get(user=rita.user, label="issued in admin")
    assert token not in str(ApiKey.objects.values_list())  # only the hash is stored
    assert AuditEvent.objects.filter(event="key.created", actor_id="admin:olivia").exists()
    assert ApiClient(token).get("/actions").status_code == 200

    # Listed on the user's page, revoked under API keys.
    assert key.prefix in olivia.get(f"/admin/auth/user/{rita.user.pk}/change/").content.decode()
    olivia.post("/admin/approvals/apikey/", {"action": "revoke", "_selected_action": [str(key.pk)]})
    assert ApiClient(token).get("/actions").status_code == 401


def test_an_inactive_user_gets_no_token(olivia, rita):
    User.objects.filter(pk=rita.user.pk).update(is_active=False)
    before = ApiKey.objects.count()
    html = olivia.post(
        "/admin/auth/user/",
        {"action": "issue_reviewer_token", "_selected_action": [str(rita.user.pk)]},
    ).content.decode()
    assert "1 inactive user(s) skipped" in html
    assert ApiKey.objects.count() == before
    assert Agent.objects.count() == 0


@pytest.mark.parametrize("escaped", [False, True], ids=["pasted", "admin-link"])
def test_an_action_id_that_looks_escaped_opens_from_a_pasted_url(
    olivia, agent, monkeypatch, escaped
):
    """The admin reads ``_3A`` in a URL as ``:``; an id like ``act_3A…`` still opens.

    One action id in eight starts with two hex digits after ``act_``: pasted
    into the URL by hand, it used to answer "doesn't exist" with a redirect.
    """
    from django.contrib.admin.utils import quote

    pk = "act_3AkxSEyLc7PotK4uvpJaUnmG"
    # The field keeps its default callable in ``_get_default`` once it was first used.
    monkeypatch.setattr(Action._meta.get_field("id"), "_get_default", lambda: pk)
    assert make_action(agent.agent).pk == pk
    shown = quote(pk) if escaped else pk

    page = olivia.get(f"/admin/approvals/action/{shown}/change/")

    assert page.status_code == 200
    assert pk in page.content.decode()
