"""Managing rules: YAML import/export, versions and audit, dry run and backtest, admin."""

from __future__ import annotations

import json
from datetime import timedelta
from io import StringIO

import pytest
import time_machine
import yaml
from django.contrib.auth.models import Group, User
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
        "rules", "import", str(seed_file), "--create-groups"
    )
    exported = run("rules", "export")
    assert yaml.safe_load(exported) == yaml.safe_load(SEED_RULES)
    again = tmp_path / "again.yaml"
    again.write_text(exported)
    run("rules", "import", str(again))
    assert yaml.safe_load(run("rules", "export")) == yaml.safe_load(SEED_RULES)
    assert RuleSet.objects.get().version == 2


def test_every_change_bumps_the_version_and_is_audited(db, seed_file):
    run("rules", "import", str(seed_file), "--create-groups")
    run("rules", "import", str(seed_file), "--create-groups")
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
    run("rules", "import", str(seed_file), "--create-groups")
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
    Group.objects.create(name="support-leads")  # backtest refuses a group import would refuse
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
    pushed = []
    for i, (who, amount, flags) in enumerate(history):
        with time_machine.travel(now + timedelta(seconds=i), tick=False):
            pushed.append(
                make_action(who.agent, payload={**refund(amount)["payload"]}, flags=flags)
            )
    with time_machine.travel(now + timedelta(minutes=5), tick=False):
        output = run("rules", "backtest", str(seed_file), "--since", "1d")
    assert "Replayed 15 action(s)" in output
    assert "auto_approve: 11" in output
    assert "auto_reject:  1" in output
    assert "review:       3 (1 over a budget)" in output
    # 4000+5000+3000+8*5000 cents, in the actions' currency; the one over the budget by name.
    assert "total auto-approved: $520.00 USD" in output
    assert f"over a budget: {pushed[-1].pk}" in output
    with time_machine.travel(now + timedelta(minutes=5), tick=False):
        by_path = run(
            "rules",
            "backtest",
            str(seed_file),
            "--since",
            "1d",
            "--amount-path",
            "payload.amount_cents",
        )
    assert "total auto-approved (payload.amount_cents): 52000" in by_path


def test_backtest_since_excludes_older_actions(agent, seed_file):
    Group.objects.create(name="support-leads")
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
        Group.objects.create(name="support-leads")
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


class TestVersionsAreKept:
    def test_every_version_is_recoverable_with_its_diff(self, db, seed_file, tmp_path):
        run("rules", "import", str(seed_file), "--create-groups")
        second = tmp_path / "second.yaml"
        second.write_text(SEED_RULES.replace("lte: 5000", "lte: 9000"))
        run("rules", "import", str(second), "--create-groups")
        assert RuleSet.objects.get().version == 2
        v1 = yaml.safe_load(run("rules", "show", "--version", "1"))
        assert v1 == yaml.safe_load(SEED_RULES)
        v2 = yaml.safe_load(run("rules", "show", "--version", "2"))
        assert v2["rules"][0]["when"]["all"][0]["lte"] == 9000
        assert yaml.safe_load(run("rules", "show")) == v2  # the current one by default
        diff = run("rules", "show", "--version", "2", "--diff")
        assert "--- v1" in diff and "+++ v2" in diff
        # (key order within a rule follows the database: jsonb sorts keys)
        lines = diff.splitlines()
        assert any(line.startswith("-") and "lte: 5000" in line for line in lines)
        assert any(line.startswith("+") and "lte: 9000" in line for line in lines)

    def test_a_kept_version_is_tied_to_the_chain_by_its_hash(self, db, seed_file):
        import hashlib

        run("rules", "import", str(seed_file), "--create-groups")
        event = AuditEvent.objects.get(event="rules.changed")
        text = run("rules", "show", "--version", "1")
        assert event.data["rules_sha256"] == hashlib.sha256(text.encode()).hexdigest()

    def test_an_admin_edit_is_a_version_too(self, db):
        ops = User.objects.create_superuser("ops", "ops@example.com", "ops-password")
        client = Client()
        client.force_login(ops)
        client.post(
            "/admin/rules/rule/add/",
            {
                "position": 0,
                "name": "all payments",
                "enabled": "on",
                "definition": json.dumps({"kind": "payment.*", "then": "review"}),
            },
        )
        shown = yaml.safe_load(run("rules", "show", "--version", "1"))
        assert shown == {"rules": [{"name": "all payments", "kind": "payment.*", "then": "review"}]}

    def test_a_version_never_kept_is_an_error_naming_it(self, db):
        with pytest.raises(CommandError, match="version 7 was not kept"):
            run("rules", "show", "--version", "7")


class TestDryRunNeedsTheRulesPermissions:
    @pytest.fixture
    def staff(self, db):
        user = User.objects.create_user("staffer", password="staffer-password", is_staff=True)
        client = Client()
        client.force_login(user)
        return user, client

    def _grant(self, user, *codenames):
        from django.contrib.auth.models import Permission

        for codename in codenames:
            user.user_permissions.add(Permission.objects.get(codename=codename))

    def test_staff_without_permissions_reads_no_threshold(self, staff):
        install_rules()
        user, client = staff
        page = client.get("/admin/rules/rule/dry-run/")
        assert page.status_code == 403
        assert "5000" not in page.content.decode()
        post = {"rules_yaml": SEED_RULES, "action_json": "", "since": "30d"}
        assert client.post("/admin/rules/rule/dry-run/", post).status_code == 403

    def test_viewing_shows_the_page_and_changing_runs_it(self, staff):
        install_rules()
        user, client = staff
        self._grant(user, "view_rule")
        assert client.get("/admin/rules/rule/dry-run/").status_code == 200
        post = {"rules_yaml": SEED_RULES, "action_json": "", "since": "30d"}
        assert client.post("/admin/rules/rule/dry-run/", post).status_code == 403
        self._grant(user, "change_rule")
        response = client.post("/admin/rules/rule/dry-run/", post)
        assert response.status_code == 200 and "Replayed" in response.content.decode()


class TestUpgrade:
    def _migration(self):
        import importlib

        return importlib.import_module("rules.migrations.0003_trail_versions")

    def test_budget_counters_keyed_by_name_move_to_the_agent_id(self, agent):
        from django.apps import apps

        from rules.models import BudgetCounter

        start = timezone.now().replace(hour=0, minute=0, second=0, microsecond=0)
        BudgetCounter.objects.create(
            rule="small refunds", scope="agent:support-bot", window_start=start, total=45000
        )
        BudgetCounter.objects.create(
            rule="per customer",
            scope='agent:support-bot|context.customer="c1"',
            window_start=start,
            total=1,
        )
        BudgetCounter.objects.create(
            rule="small refunds", scope="agent:gone-bot", window_start=start, total=1
        )
        self._migration().key_budgets_by_agent_id(apps, None)
        scopes = set(BudgetCounter.objects.values_list("scope", flat=True))
        pk = agent.agent.pk
        assert scopes == {f"agent#{pk}", f'agent#{pk}|context.customer="c1"', "agent:gone-bot"}

    def test_the_rule_set_in_force_at_the_upgrade_is_kept(self, db, seed_file):
        from django.apps import apps

        from rules.models import RuleSetVersion

        run("rules", "import", str(seed_file), "--create-groups")
        RuleSetVersion.objects.all().delete()  # as before the upgrade
        self._migration().keep_current_version(apps, None)
        assert yaml.safe_load(run("rules", "show", "--version", "1")) == yaml.safe_load(SEED_RULES)
