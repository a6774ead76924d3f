"""Managing rules: YAML import/export, versions and audit, dry run and backtest, admin."""

from __future__ import annotations

import json
from datetime import timedelta
from io import StringIO

import pytest
import time_machine
import yaml
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.test import Client
from django.utils import timezone

from audit.models import AuditEvent
from rules import services as rule_services
from rules.models import Rule, RuleSet
from tests.factories import SEED_RULES, install_rules, make_action, refund


def run(*args) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


@pytest.fixture
def seed_file(tmp_path):
    path = tmp_path / "rules.yaml"
    path.write_text(SEED_RULES)
    return path


def test_import_then_export_round_trips(db, seed_file, tmp_path):
    assert "Imported 3 rule(s); the rule set is now version 1" in run(
        "rules", "import", str(seed_file)
    )
    exported = run("rules", "export")
    assert yaml.safe_load(exported) == yaml.safe_load(SEED_RULES)
    again = tmp_path / "again.yaml"
    again.write_text(exported)
    run("rules", "import", str(again))
    assert yaml.safe_load(run("rules", "export")) == yaml.safe_load(SEED_RULES)
    assert RuleSet.objects.get().version == 2


def test_every_change_bumps_the_version_and_is_audited(db, seed_file):
    run("rules", "import", str(seed_file))
    run("rules", "import", str(seed_file))
    events = AuditEvent.objects.filter(event="rules.changed").order_by("seq")
    assert [e.data["version"] for e in events] == [1, 2]
    assert events[0].data["rules"] == [
        "small refunds",
        "absurd refunds",
        "everything else in payments",
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("rules: [{name: a, then: review}, {name: b, then: auto_reject}]", "rule 'b': reason"),
        (
            "rules: [{name: a, then: review, when: {path: payload.x, lte: [1]}}]",
            "rule 'a': when.lte",
        ),
        ("rules: [{name: a, then: review", "yaml"),
        ("rules: {name: a}", "must be a list"),
    ],
)
def test_a_bad_file_is_refused_and_leaves_the_current_set_untouched(
    db, seed_file, tmp_path, text, message
):
    run("rules", "import", str(seed_file))
    before = run("rules", "export")
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    with pytest.raises(CommandError, match=message.replace("[", r"\[")):
        run("rules", "import", str(bad))
    assert run("rules", "export") == before
    assert RuleSet.objects.get().version == 1


def test_rules_test_prints_the_verdict_and_trace(db, seed_file, tmp_path):
    action = tmp_path / "action.json"
    action.write_text(
        json.dumps(
            {
                "kind": "payment.refund",
                "agent": "bot",
                "payload": {"amount_cents": 3000},
                "flags": ["policy_exception"],
            }
        )
    )
    output = run("rules", "test", str(seed_file), "--action", str(action))
    assert "verdict: review" in output
    assert "rule: everything else in payments" in output
    assert "✗ small refunds" in output and "✓ everything else in payments" in output
    assert Rule.objects.count() == 0  # a dry run changes nothing


def test_backtest_matches_a_hand_computed_history(agent, other_agent, seed_file):
    # History, replayed oldest first through the seed rules (budget: 50,000 cents a day per agent):
    now = timezone.now().replace(hour=12)
    history = [
        (agent, 4000, []),  # auto_approve (4,000 of the budget)
        (agent, 5000, []),  # auto_approve (9,000)
        (agent, 5000, ["policy_exception"]),  # review
        (agent, 20000, []),  # review
        (agent, 2_000_000, []),  # auto_reject
        (other_agent, 3000, []),  # auto_approve (other agent's own budget)
    ] + [(agent, 5000, [])] * 9  # 8 fit (49,000), the 9th is over the budget: review
    for i, (who, amount, flags) in enumerate(history):
        with time_machine.travel(now + timedelta(seconds=i), tick=False):
            make_action(who.agent, payload={**refund(amount)["payload"]}, flags=flags)
    with time_machine.travel(now + timedelta(minutes=5), tick=False):
        output = run("rules", "backtest", str(seed_file), "--since", "1d")
    assert "Replayed 15 action(s)" in output
    assert "auto_approve: 11" in output
    assert "auto_reject:  1" in output
    assert "review:       3 (1 over a budget)" in output
    assert "total auto-approved (payload.amount_cents): 52000" in output  # 4000+5000+3000+8*5000


def test_backtest_since_excludes_older_actions(agent, seed_file):
    with time_machine.travel(timezone.now() - timedelta(days=40)):
        make_action(agent.agent, payload=refund(1000)["payload"])
    make_action(agent.agent, payload=refund(1000)["payload"])
    assert "Replayed 1 action(s)" in run("rules", "backtest", str(seed_file))
    assert "Replayed 2 action(s)" in run("rules", "backtest", str(seed_file), "--since", "all")


class TestAdmin:
    @pytest.fixture
    def ops(self, db):
        user = User.objects.create_superuser("ops", "ops@example.com", "ops-password")
        client = Client()
        client.force_login(user)
        return client

    def test_a_malformed_rule_is_refused_with_a_message_naming_it(self, ops):
        response = ops.post(
            "/admin/rules/rule/add/",
            {
                "position": 0,
                "name": "bad",
                "enabled": "on",
                "definition": json.dumps(
                    {"then": "review", "when": {"path": "payload.x", "between": [1, 2]}}
                ),
            },
        )
        assert response.status_code == 200
        assert "rule &#x27;bad&#x27;: when.between: unknown operator" in response.content.decode()
        assert not Rule.objects.exists()

    def test_saving_a_rule_bumps_the_version_and_audits_who(self, ops):
        response = ops.post(
            "/admin/rules/rule/add/",
            {
                "position": 0,
                "name": "all payments",
                "enabled": "on",
                "definition": json.dumps(
                    {"kind": "payment.*", "then": "review", "group": "support-leads"}
                ),
            },
        )
        assert response.status_code == 302
        assert RuleSet.objects.get().version == 1
        event = AuditEvent.objects.get(event="rules.changed")
        assert (event.actor_id, event.data["rule"]) == ("ops", "all payments")
        assert rule_services.current_rules().rules[0].group == "support-leads"

    def test_disabling_a_rule_takes_it_out_of_evaluation(self, ops, agent):
        install_rules()
        rule = Rule.objects.get(name="small refunds")
        ops.post(
            f"/admin/rules/rule/{rule.pk}/change/",
            {
                "position": rule.position,
                "name": rule.name,
                "definition": json.dumps(rule.definition),
            },
        )
        assert not Rule.objects.get(pk=rule.pk).enabled
        assert agent.client().post("/actions", refund(3000)).json()["status"] == "pending"

    def test_the_dry_run_page_backtests_a_candidate(self, ops, agent):
        make_action(agent.agent, payload=refund(3000)["payload"])
        page = ops.get("/admin/rules/rule/dry-run/")
        assert page.status_code == 200
        response = ops.post(
            "/admin/rules/rule/dry-run/",
            {"rules_yaml": SEED_RULES, "action_json": "", "since": "30d"},
        )
        assert "auto_approve: 1" in response.content.decode()
        assert Rule.objects.count() == 0

    def test_the_dry_run_page_names_a_bad_rule(self, ops):
        response = ops.post(
            "/admin/rules/rule/dry-run/",
            {"rules_yaml": "rules: [{name: x, then: nope}]", "action_json": "", "since": "30d"},
        )
        assert "rule &#x27;x&#x27;: then" in response.content.decode()
