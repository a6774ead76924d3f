"""A rule naming a reviewer group that does not exist is an error, not a queue nobody reads."""

from __future__ import annotations

import json
from datetime import timedelta
from io import StringIO

import pytest
from django.conf import settings
from django.contrib.auth.models import Group, User
from django.core.management import CommandError, call_command
from django.test import Client
from django.utils import timezone

from approvals import services
from audit.models import AuditEvent
from rules import engine
from rules import services as rule_services
from rules.models import Rule, RuleSet
from tests.factories import make_action

# Service tests: no test-case transaction around the code (tests/core/test_service_transactions.py).
pytestmark = pytest.mark.django_db(transaction=True)


TYPO = "rules: [{name: leads, kind: 'payment.*', then: review, group: suport-leads}]"
ESCALATION_TYPO = (
    "rules: [{name: leads, kind: 'payment.*', then: review, group: reviewers,"
    " escalate_after_s: 60, escalate_to: managrs}]"
)


def run(*args) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


@pytest.fixture
def typo_file(tmp_path):
    path = tmp_path / "rules.yaml"
    path.write_text(TYPO)
    return path


def test_import_refuses_an_unknown_group(db, typo_file):
    with pytest.raises(
        CommandError, match="rule 'leads': group: no reviewer group is named 'suport-leads'"
    ):
        run("rules", "import", str(typo_file))
    assert not Rule.objects.exists()
    assert not RuleSet.objects.filter(version__gt=0).exists()
    assert not Group.objects.filter(name="suport-leads").exists()


def test_import_refuses_an_unknown_escalation_group(db, tmp_path):
    path = tmp_path / "rules.yaml"
    path.write_text(ESCALATION_TYPO)
    Group.objects.create(name="reviewers")
    with pytest.raises(CommandError, match="escalate_to: no reviewer group is named 'managrs'"):
        run("rules", "import", str(path))


def test_create_groups_creates_them_on_purpose_and_says_so(db, typo_file):
    assert "Imported 1 rule(s)" in run("rules", "import", str(typo_file), "--create-groups")
    assert Group.objects.filter(name="suport-leads").exists()
    event = AuditEvent.objects.get(event="rules.changed")
    assert event.data["created_groups"] == ["suport-leads"]


def test_the_service_refuses_too(db):
    with pytest.raises(engine.RuleError, match="suport-leads"):
        rule_services.replace_rules(rule_services.parse_yaml(TYPO), by="cli")


def test_admin_refuses_a_rule_naming_an_unknown_group(db):
    ops = User.objects.create_superuser("ops", password="ops-password")
    client = Client()
    client.force_login(ops)
    response = client.post(
        "/admin/rules/rule/add/",
        {
            "position": 0,
            "name": "leads",
            "enabled": "on",
            "definition": json.dumps(
                {"kind": "payment.*", "then": "review", "group": "suport-leads"}
            ),
        },
    )
    assert response.status_code == 200
    assert "no reviewer group is named &#x27;suport-leads&#x27;" in response.content.decode()
    assert not Rule.objects.exists()
    assert not Group.objects.filter(name="suport-leads").exists()


def test_at_push_a_vanished_group_falls_back_to_the_default_with_a_trace(agent, db):
    rule_services.replace_rules(rule_services.parse_yaml(TYPO), by="cli", create_groups=True)
    Group.objects.filter(name="suport-leads").delete()
    action = make_action(agent.agent)
    assert action.review_group.name == settings.IMPRI_DEFAULT_GROUP
    assert not Group.objects.filter(name="suport-leads").exists()  # not re-created, empty
    why = "group 'suport-leads' does not exist: routed to the default group"
    assert why in action.rule_trace[-1]["why"]
    matched = AuditEvent.objects.get(action_id=action.pk, event="rule.matched")
    assert matched.data["routed_to"] == settings.IMPRI_DEFAULT_GROUP
    assert why in matched.data["trace"][-1]["why"]


def test_an_escalation_to_a_vanished_group_goes_to_the_default(agent, db):
    Group.objects.create(name="managrs")
    Group.objects.create(name="leads-team")
    text = ESCALATION_TYPO.replace("group: reviewers", "group: leads-team")
    rule_services.replace_rules(rule_services.parse_yaml(text), by="cli")
    action = make_action(agent.agent)
    Group.objects.filter(name="managrs").delete()
    assert services.escalate_due(now=timezone.now() + timedelta(seconds=120)) == 1
    action.refresh_from_db()
    assert action.review_group.name == settings.IMPRI_DEFAULT_GROUP
    event = AuditEvent.objects.get(action_id=action.pk, event="action.escalated")
    assert event.data["to"] == settings.IMPRI_DEFAULT_GROUP
    assert "'managrs' does not exist" in event.data["why"]
