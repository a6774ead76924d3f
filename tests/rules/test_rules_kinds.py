"""Kinds match exactly as spelled, and the upgrade to the closed world (issue 39).

A look-alike kind (``payment-refund``, ``payments.refund``) is simply
undeclared, so it is held over every threshold; a rules file that names a kind
no push could ever have (uppercase, spaces, invisible characters) is refused at
import instead of matching nothing. A rules file from before still imports, and
``impri rules kinds --undeclared`` names the kinds to declare.
"""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
import time_machine
from django.core.management import call_command
from django.utils import timezone

from approvals.backtest_history import past_action_views as past_actions
from approvals.models import ActionStatus
from rules import engine, services
from rules.backtest import backtest
from tests.factories import SEED_RULES, install_rules, make_action, refund

BEFORE = """
rules:
  - name: small refunds
    kind: payment.refund
    when: {path: payload.amount_cents, lte: 5000}
    then: auto_approve
    budget: {per: day, sum: amount, max: 50000}
  - name: anything mcp
    kind: 'mcp.*.create_?efund'
    then: review
    edit_bounds: {payload.lines.0.amount_cents: {min: 1, max: original}}
kinds:
  psp.refund:
    schema: {type: object, required: [charge, amount, currency]}
    money:
      - {amount: payload.amount, currency: payload.currency}
  my-app.note_v2: {money: []}
"""


def run(*args) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


@pytest.mark.parametrize("text", [SEED_RULES, BEFORE], ids=["seed", "with kinds"])
def test_a_rules_file_from_before_still_imports(db, text):
    version = install_rules(text)
    assert version >= 1


@pytest.mark.parametrize(
    "name",
    [
        "Payment.Refund",
        "payment refund",
        "payment.refund\u200b",
        "payment.refund\ufe0f",
        "pay\u00e9",
    ],
    ids=["uppercase", "space", "zero-width space", "variation selector", "accent"],
)
def test_a_kinds_entry_that_could_never_match_is_refused(db, name):
    text = f'rules: []\nkinds:\n  "{name}": {{money: []}}'
    with pytest.raises(engine.RuleError, match="could never match a kind"):
        services.parse_file(text)


@pytest.mark.parametrize(
    "kind",
    ["Payment.*", "payment .refund", "payment.refund\u200b", "*\u00a0"],
    ids=["uppercase", "space", "zero-width space", "no-break space"],
)
def test_a_rule_kind_that_could_never_match_is_refused(db, kind):
    text = f'rules: [{{name: r, kind: "{kind}", then: auto_approve}}]'
    with pytest.raises(engine.RuleError, match="kind: .* could never match a kind"):
        services.parse_file(text)


@pytest.mark.parametrize("kind", ["payment-refund", "payment_refund", "payments.refund"])
def test_a_look_alike_kind_is_undeclared(agent, rita, settings, kind):
    settings.IMPRI_STEP_UP_CENTS = 100_000
    install_rules("rules: [{name: everything, kind: '*', then: auto_approve}]")
    action = make_action(
        agent.agent, kind=kind, payload={"amount_cents": -99_999, "currency": "USD"}, editable=[]
    )
    assert action.status == ActionStatus.PENDING
    assert action.money is None


def test_rules_kinds_lists_the_declarations(db):
    install_rules(BEFORE)
    output = run("rules", "kinds")
    assert "payment.refund: payload.amount_cents in payload.currency" in output
    assert "psp.refund: payload.amount in payload.currency" in output
    assert "my-app.note_v2: moves no money (money: [])" in output


def test_rules_kinds_undeclared_names_what_to_declare(agent):
    with time_machine.travel(timezone.now() - timedelta(days=40)):
        make_action(agent.agent, kind="crm.old_note", payload={"n": 1}, editable=[])
    for kind in ("billing.refund", "billing.refund", "crm.note"):
        make_action(agent.agent, kind=kind, payload={"n": 1}, editable=[])
    make_action(agent.agent)  # payment.refund: declared by default
    output = run("rules", "kinds", "--undeclared")
    assert "2 kind(s) pushed in the last 30 days declare no money" in output
    assert "billing.refund: 2 action(s)" in output and "crm.note: 1 action(s)" in output
    assert "crm.old_note" not in output and "payment.refund" not in output
    install_rules("rules: []\nkinds: {billing.refund: {money: []}, crm.note: {money: []}}")
    assert "Every kind pushed in the last 30 days is declared" in run(
        "rules", "kinds", "--undeclared"
    )


def test_a_backtest_routes_an_undeclared_kinds_auto_approval_to_review(agent):
    make_action(agent.agent, kind="billing.refund", payload={"n": 1}, editable=[])
    make_action(agent.agent, **refund(1000))
    rules = services.parse_file("rules: [{name: all, kind: '*', then: auto_approve}]").rules
    report = backtest(rules, past_actions(None))
    assert (report.outcomes["auto_approve"], report.outcomes["review"]) == (1, 1)


def test_detect_is_warned_at_every_start(settings):
    from rules.checks import undeclared_kinds_detected

    assert undeclared_kinds_detected() == []
    settings.IMPRI_UNDECLARED_KINDS = "detect"
    [warning] = undeclared_kinds_detected()
    assert warning.id == "impri.W004" and "impri rules kinds --undeclared" in warning.hint
