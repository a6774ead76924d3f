"""Holes a security review found in the closed world for money (issues 39 and 40), each closed.

A kind spelled with a trailing newline, a ``sign: any`` amount under an
``lte`` rule, numeric text under a key the detector does not know, a currency
under another spelling, an amount too large for the columns, a YAML file that
nests through aliases, and a gateway tool that declares ``money: []``.
"""

from __future__ import annotations

import json

import pytest
import yaml
from django.test import Client

from approvals import services
from approvals.models import Action, ActionStatus
from approvals.schemas import ActionIn
from tests.factories import install_rules, refund_body

TWO_APPROVALS = """
kinds:
  payment.refund:
    money: [{amount: payload.amount_cents, currency: payload.currency}]
rules:
  - name: absurd refunds
    kind: payment.refund
    when: {path: payload.amount_cents, gt: 1000000}
    then: auto_reject
    reason: above the hard cap
  - name: refunds need two
    kind: payment.refund
    then: review
    approvals_required: 2
"""


def _body(kind: str, amount: int) -> dict:
    body = refund_body()
    body["kind"] = kind
    body["payload"] = {**body["payload"], "amount_cents": amount}
    return body


@pytest.mark.parametrize("kind", ["payment.refund\n", "payment.refund\r\n", "\npayment.refund"])
def test_a_kind_with_a_line_break_is_refused_not_matched_past_its_rules(agent, kind):
    """``$`` matches before a final newline: ``payment.refund\\n`` was a kind of its own, which
    no exact rule (the hard cap, two approvals) matched."""
    install_rules(TWO_APPROVALS)
    response = agent.client().post("/actions", _body(kind, 5_000_000))
    assert response.status_code == 422, response.json()
    assert "kind" in json.dumps(response.json())
    assert not Action.objects.exists()


@pytest.mark.parametrize("flag", ["policy_exception\n", "vip\n"])
def test_a_flag_with_a_trailing_newline_is_refused(agent, flag):
    body = _body("payment.refund", 5_000)
    body["flags"] = [flag]
    response = agent.client().post("/actions", body)
    assert response.status_code == 422, response.json()
    assert not Action.objects.exists()


def test_a_cursor_with_a_trailing_newline_is_refused(agent):
    response = agent.client().get("/actions?cursor=1_abc%0A")
    assert response.status_code == 422, response.json()


# --- Under the closed world, text holding a figure is frozen whatever its key ---------------------


def _undeclared(agent, payload: dict, editable: list[str]) -> Action:
    """An action of ``billing.refund``, a kind declared nowhere."""
    action, _ = services.push_action(
        agent.agent,
        ActionIn(
            kind="billing.refund",
            title="Refund",
            preview={"format": "plain", "body": "refund"},
            payload=payload,
            editable=editable,
        ),
    )
    return action


@pytest.mark.parametrize(
    "text, raised",
    [
        ("$15.00", "$15000.00"),
        ("15.00 USD", "15000.00 USD"),
        ("\u0661\u0665\u0660\u0660", "\u0669\u0669\u0669\u0660\u0660"),  # Arabic-Indic digits
        ("1 500,00", "1 500 000,00"),
        ("EUR 15", "EUR 15000"),
    ],
)
def test_an_undeclared_kinds_text_with_a_figure_may_not_be_edited(agent, rita, text, raised):
    """``payout`` is no word the detector knows, and "$15.00" no text it reads: still frozen."""
    action = _undeclared(
        agent, {"payout": text, "order": "A1", "note": "thanks"}, ["payload.payout", "payload.note"]
    )
    response = rita.client().post(
        f"/actions/{action.pk}/approve", {"edits": {"payload.payout": raised}}
    )
    assert response.status_code == 422, response.json()
    assert "edits.payload.payout" in json.dumps(response.json())
    assert Action.objects.get(pk=action.pk).payload["payout"] == text
    # Text without a digit stays editable.
    edited = rita.client().post(
        f"/actions/{action.pk}/approve", {"edits": {"payload.note": "thank you"}}
    )
    assert edited.status_code != 422, edited.json()


# --- Amounts past 2^53 − 1 minor units are unreadable: a 422 declared, held otherwise -----------

PSP = "kinds:\n  psp.refund:\n    money: [{amount: payload.amount, currency: USD, minor_units: false}]\n"
LINES = "kinds:\n  psp.batch:\n    money: [{amount: payload.lines.*.amount_cents, currency: USD}]\n"


def _raw_push(agent, body: dict):
    client = Client(raise_request_exception=False)
    return client.post(
        "/api/v1/actions",
        json.dumps(body),
        content_type="application/json",
        headers={"Authorization": f"Bearer {agent.key}"},
    )


@pytest.mark.parametrize("amount", ["9" * 25 + ".00", "90071992547409.92", 9e15])
def test_a_declared_amount_past_2_53_minor_units_is_a_422_naming_it(agent, amount):
    install_rules(PSP + "rules: []\n")
    body = {**_body("psp.refund", 1), "kind": "psp.refund", "payload": {"amount": amount}}
    body.pop("editable", None)
    response = _raw_push(agent, body)
    assert response.status_code == 422, (response.status_code, response.content[:300])
    assert "payload.amount" in response.content.decode()
    assert "2^53" in response.content.decode()
    assert not Action.objects.exists()


def test_declared_lines_adding_up_past_2_53_are_a_422_naming_the_first(agent):
    install_rules(LINES + "rules: []\n")
    lines = [{"amount_cents": 2**53 - 1} for _ in range(1_100)]
    body = {**_body("psp.batch", 1), "kind": "psp.batch", "payload": {"lines": lines}}
    body.pop("editable", None)
    response = _raw_push(agent, body)
    assert response.status_code == 422, (response.status_code, response.content[:300])
    assert "payload.lines.0.amount_cents" in response.content.decode()
    assert not Action.objects.exists()


@pytest.mark.parametrize("mode", ["strict", "detect"])
def test_an_undeclared_amount_past_2_53_is_held_over_every_threshold(agent, settings, mode):
    settings.IMPRI_UNDECLARED_KINDS = mode
    settings.IMPRI_STEP_UP_CENTS = 100_000
    lines = [{"amount_cents": 2**53 - 1} for _ in range(1_100)]
    install_rules("rules:\n  - {name: all, kind: 'billing.*', then: auto_approve}\n")
    body = {
        **_body("billing.batch", 1),
        "kind": "billing.batch",
        "payload": {"amount": "9" * 30, "lines": lines},
    }
    body.pop("editable", None)
    response = _raw_push(agent, body)
    assert response.status_code == 201, (response.status_code, response.content[:300])
    action = Action.objects.get()
    assert action.status == ActionStatus.PENDING  # not auto-approved: its amount is unknown
    assert action.amount_minor is None


# --- A sign: any amount: no auto-approval at or above step-up; no one-sided cap at import -------

SIGNED = """
kinds:
  payment.credit:
    money: [{amount: payload.amount_cents, currency: payload.currency, sign: any}]
"""


def test_an_auto_approval_at_or_above_step_up_goes_to_review(agent, settings):
    """A rule comparing signed values passed −1,000,000 as ``lte: 5000``; whatever a rule
    says, no action moving the step-up threshold or more is approved unseen."""
    settings.IMPRI_STEP_UP_CENTS = 100_000
    install_rules(
        SIGNED + "rules:\n  - {name: credits, kind: payment.credit, then: auto_approve}\n"
    )
    response = agent.client().post("/actions", _body("payment.credit", -1_000_000))
    assert response.status_code == 201, response.json()
    action = Action.objects.get()
    assert action.status == ActionStatus.PENDING
    assert "IMPRI_STEP_UP_CENTS=100000" in action.rule_trace[-1]["why"]
    assert "1000000 minor units" in action.rule_trace[-1]["why"]
    small = agent.client().post("/actions", _body("payment.credit", -500))
    assert small.json()["status"] == "approved"


def test_without_a_step_up_threshold_auto_approval_is_as_before(agent, settings):
    settings.IMPRI_STEP_UP_CENTS = None
    install_rules(
        SIGNED + "rules:\n  - {name: credits, kind: payment.credit, then: auto_approve}\n"
    )
    response = agent.client().post("/actions", _body("payment.credit", -1_000_000))
    assert response.json()["status"] == "approved"


@pytest.mark.parametrize(
    "when",
    [
        "{path: payload.amount_cents, lte: 5000}",
        "{path: payload.amount_cents, lt: 5000}",
        "{not: {path: payload.amount_cents, gt: 5000}}",
        "{all: [{path: flags, contains: vip}, {path: payload.amount_cents, lte: 5000}]}",
    ],
)
def test_a_one_sided_cap_on_a_sign_any_amount_is_refused_at_import(when):
    from rules import engine
    from rules import services as rule_services

    text = (
        SIGNED
        + f"rules:\n  - name: small payments\n    kind: payment.*\n    when: {when}\n    then: auto_approve\n"
    )
    with pytest.raises(engine.RuleError) as caught:
        rule_services.parse_file(text)
    message = str(caught.value)
    assert "small payments" in message and "sign: any" in message
    assert "sign: positive" in message


@pytest.mark.parametrize(
    "when",
    [
        "{all: [{path: payload.amount_cents, gte: -5000}, {path: payload.amount_cents, lte: 5000}]}",
        "{path: payload.amount_cents, gt: 5000}",
    ],
)
def test_a_two_sided_cap_or_a_floor_imports(when):
    from rules import services as rule_services

    text = (
        SIGNED
        + f"rules:\n  - name: small payments\n    kind: payment.*\n    when: {when}\n    then: review\n"
    )
    assert rule_services.parse_file(text).rules[0].name == "small payments"


def test_the_admin_refuses_a_one_sided_cap_on_a_declared_sign_any_amount(db):
    from django.core.exceptions import ValidationError

    from rules.models import Rule

    install_rules(SIGNED + "rules: []\n")
    rule = Rule(
        name="small",
        position=0,
        definition={
            "kind": "payment.credit",
            "when": {"path": "payload.amount_cents", "lte": 5000},
            "then": "auto_approve",
        },
    )
    with pytest.raises(ValidationError, match="sign: any"):
        rule.clean()


# --- An undeclared kind's currency never changes, however it is spelled -------------------------


@pytest.mark.parametrize(
    "key, value",
    [
        ("currency_iso_code", "IDR"),
        ("currencyIsoCode", "IDR"),
        ("settlement_currency", "IDR"),
        ("ccy", "IDR"),
        ("settleCcy", "IDR"),
        ("target", "idr"),  # a key that says nothing, a value that is an ISO 4217 code
    ],
)
def test_an_undeclared_kinds_currency_in_editable_is_a_422(agent, key, value):
    body = {
        "kind": "billing.refund",
        "title": "Refund",
        "preview": {"format": "plain", "body": "refund"},
        "payload": {"amount_cents": 99_999, key: value},
        "editable": [f"payload.{key}"],
    }
    response = agent.client().post("/actions", body)
    assert response.status_code == 422, response.json()
    assert "editable[0]" in json.dumps(response.json())
    assert not Action.objects.exists()


def test_an_earlier_actions_currency_under_another_spelling_is_not_edited(agent, rita):
    """An action pushed before the check at push listed it: the edit is refused instead."""
    action = _undeclared(agent, {"amount_cents": 99_999, "ccy": "IDR", "ref": "r"}, ["payload.ref"])
    Action.objects.filter(pk=action.pk).update(editable=["payload.ref", "payload.ccy"])
    response = rita.client().post(
        f"/actions/{action.pk}/approve", {"edits": {"payload.ccy": "GBP"}}
    )
    assert response.status_code == 422, response.json()
    assert "edits.payload.ccy" in json.dumps(response.json())
    assert Action.objects.get(pk=action.pk).payload["ccy"] == "IDR"


# --- YAML: an alias may only be merged, and what merges expand to is measured -------------------


def _alias_chain(count: int) -> str:
    items = ["&c0 {path: payload.a, eq: 1}"] + [
        f"&c{i} {{not: *c{i - 1}}}" for i in range(1, count)
    ]
    when = "{all: [" + ", ".join(items) + "]}"
    return f'rules:\n  - name: x\n    kind: "*"\n    when: {when}\n    then: review\n'


YAML_BOMBS = {
    "alias chain": _alias_chain(2_000),
    "billion laughs": "a: &a [1,1,1,1,1,1,1,1,1]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a]\n"
    "c: &c [*b,*b,*b,*b,*b,*b,*b,*b]\nrules: [*c,*c,*c,*c,*c,*c,*c,*c]\n",
    "merge laughs": "a0: &a0 {v: [1, 2, 3]}\n"
    + "".join(
        f"a{i}: &a{i} {{p: {{<<: *a{i - 1}}}, q: {{<<: *a{i - 1}}}}}\n" for i in range(1, 40)
    ),
    "merge chain": "a0: &a0 {x: 1}\n"
    + "".join(f"a{i}: &a{i} {{<<: *a{i - 1}, y{i}: 1}}\n" for i in range(1, 2_000)),
    "cycle": "a: &a {x: {<<: *a}}\n",
}


@pytest.mark.parametrize("name", sorted(YAML_BOMBS))
def test_yaml_aliases_get_a_one_line_error_never_a_recursion(name):
    from plumbing import strict_json, yaml_errors
    from rules import engine
    from rules import services as rule_services

    text = YAML_BOMBS[name]
    with pytest.raises(yaml.YAMLError) as raised:
        strict_json.load_yaml(text)
    assert yaml_errors.describe(raised.value, text).splitlines()[0].startswith("line ")
    with pytest.raises(engine.RuleError):
        rule_services.parse_file(text)


def test_the_rules_admin_answers_a_yaml_bomb_with_a_form_error(admin_client):
    response = admin_client.post(
        "/admin/rules/rule/yaml/", {"rules_yaml": YAML_BOMBS["alias chain"]}
    )
    assert response.status_code == 200
    assert b"is not accepted here" in response.content


def test_merge_keys_still_merge():
    from plumbing import strict_json

    text = "a: &a {x: 1}\nb: &b {y: 2}\nc: {<<: [*a, *b], z: 3}\nd: {<<: *a, x: 4}\n"
    loaded = strict_json.load_yaml(text)
    assert loaded["c"] == {"x": 1, "y": 2, "z": 3}
    assert loaded["d"] == {"x": 4}
