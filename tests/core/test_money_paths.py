"""One spelling per path, and a currency that never changes (issue 39).

``payload.lines.00.amount_cents`` (or a fullwidth ``０``, or ``+0``) named the
same field as ``payload.lines.0.amount_cents`` and escaped its bounds: an
ordinary token raised 500 to 10,000,000. And a currency listed in ``editable``
turned 99,999 IDR into 99,999 GBP. Both are refused at push, at rules import
and in an edit, naming the path.
"""

from __future__ import annotations

import pytest

from approvals.models import Action
from rules import engine
from rules.paths import path_problem
from tests.factories import install_rules, make_action, refund_body

LINES = {"currency": "USD", "memo": "May payout", "lines": [{"amount_cents": 500}]}
SPELLINGS = {"leading zero": "00", "fullwidth": "\uff10", "plus": "+0", "underscore": "0_0"}


def push(agent, **overrides):
    return agent.client().post("/actions", refund_body(**overrides))


@pytest.mark.parametrize("index", SPELLINGS.values(), ids=SPELLINGS)
def test_an_index_spelled_otherwise_is_refused_in_editable(agent, index):
    path = f"payload.lines.{index}.amount_cents"
    response = push(agent, kind="psp.payout", payload=LINES, editable=["payload.memo", path])
    assert response.status_code == 422, response.content
    assert response.json()["field"] == "editable[1]"
    assert "ASCII digits without a leading zero" in response.json()["detail"]
    assert not Action.objects.exists()


@pytest.mark.parametrize("index", SPELLINGS.values(), ids=SPELLINGS)
def test_an_index_spelled_otherwise_is_refused_in_an_edit(agent, rita, index):
    install_rules(
        "rules: []\nkinds: {psp.payout: {money: [{amount: payload.lines.*.amount_cents, currency: payload.currency}]}}"
    )
    action = make_action(
        agent.agent, kind="psp.payout", payload=LINES, editable=["payload.lines.0.amount_cents"]
    )
    path = f"payload.lines.{index}.amount_cents"
    response = rita.client().post(f"/actions/{action.pk}/approve", {"edits": {path: 10_000_000}})
    assert response.status_code == 422, response.content
    assert response.json()["field"] == f"edits.{path}"
    canonical = {"payload.lines.0.amount_cents": 10_000_000}
    raised = rita.client().post(f"/actions/{action.pk}/approve", {"edits": canonical})
    assert raised.status_code == 422 and "at most 500" in raised.json()["detail"]


@pytest.mark.parametrize("index", SPELLINGS.values(), ids=SPELLINGS)
def test_an_index_spelled_otherwise_is_refused_in_a_rules_edit_bound(db, index):
    text = (
        "rules: [{name: r, kind: psp.payout, then: review, "
        f"edit_bounds: {{'payload.lines.{index}.amount_cents': {{max: 10}}}}}}]"
    )
    with pytest.raises(engine.RuleError, match="without a leading zero"):
        install_rules(text)


@pytest.mark.parametrize("index", SPELLINGS.values(), ids=SPELLINGS)
def test_an_index_spelled_otherwise_is_refused_in_a_declaration(db, index):
    text = (
        "rules: []\nkinds: {psp.payout: {money: "
        f"[{{amount: 'payload.lines.{index}.amount_cents', currency: USD}}]}}}}"
    )
    with pytest.raises(engine.RuleError, match=r"psp.payout.money\[0\].amount"):
        install_rules(text)


def test_the_one_spelling_is_kept_and_a_key_that_is_no_index_is_any_text():
    assert path_problem("payload.lines.0.amount_cents") is None
    assert path_problem("payload.lines.12.amount_cents") is None
    assert path_problem("payload.by_code.EUR") is None
    assert path_problem("payload.lines.*.amount_cents", wildcard=True) is None
    assert path_problem("payload.lines.-1.amount_cents")


def test_a_declared_currency_in_editable_is_refused(agent):
    response = push(agent, editable=["payload.amount_cents", "payload.currency"])
    assert response.status_code == 422, response.content
    assert response.json()["field"] == "editable[1]"
    assert "currency, which never changes" in response.json()["detail"]
    assert not Action.objects.exists()


@pytest.mark.parametrize("key", ["currency", "currency_code", "currencyCode", "Currency"])
def test_a_currency_of_an_undeclared_kind_in_editable_is_refused(agent, key):
    payload = {"amount": {"value": 99_999, key: "IDR"}}
    response = push(
        agent, kind="billing.refund", payload=payload, editable=[f"payload.amount.{key}"]
    )
    assert response.status_code == 422, response.content
    assert response.json()["field"] == "editable[0]"


@pytest.mark.parametrize("index", SPELLINGS.values(), ids=SPELLINGS)
def test_an_index_spelled_otherwise_is_refused_in_a_rule_condition(db, index):
    text = (
        "rules: [{name: r, kind: psp.payout, then: auto_approve, "
        f"when: {{path: 'payload.lines.{index}.amount_cents', lte: 500}}}}]"
    )
    with pytest.raises(engine.RuleError, match=r"when.path: list index"):
        install_rules(text)
