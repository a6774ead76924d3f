"""A closed world for money (issue 39): what a kind does not declare is held to the strictest guard.

Tried as an attacker would: the money shapes of payment APIs (Adyen's nested
object, a list, PayPal's decimal text), words the detector does not know and a
key with an invisible character walked past a detector. Now a kind that
declares no money moves an unknown amount: a service token and Slack can't
approve it, the inbox asks for the second factor, an ``auto_approve`` rule
routes it to review, and no number of it may be raised by an edit. Declared,
the same shapes are read exactly.
"""

from __future__ import annotations

import json

import pytest
from django.test import Client

from approvals import money as action_money
from approvals import presenters, services
from approvals.models import Action, ActionStatus
from audit.models import AuditEvent
from tests.factories import install_rules, make_action
from tests.identity.test_two_factor import _service_token
from tests.slack.test_slack import click, ephemeral_text, slack, team  # noqa: F401  (fixtures)

THRESHOLD = 100_000  # IMPRI_STEP_UP_CENTS
KIND = "billing.refund"  # declared nowhere

# Each shape moves 150,000 minor units (1,500.00) of its currency, and the path to raise.
SHAPES = {
    "nested": ({"amount": {"value": 150_000, "currency": "EUR"}}, "payload.amount.value", 999_999),
    "list": ({"amount": [150_000], "currency": "USD"}, "payload.amount.0", 999_999),
    "decimal text": (
        {"amount": {"value": "1500.00", "currency_code": "USD"}},
        "payload.amount.value",
        "9999.00",
    ),
    "unknown word": ({"montant": 150_000, "devise": "EUR"}, "payload.montant", 999_999),
    "run together": ({"refundamount": 150_000, "currency": "USD"}, "payload.refundamount", 999_999),
    "invisible character": (
        {"amo\ufe0funt": 150_000, "currency": "USD"},
        "payload.amo\ufe0funt",
        999_999,
    ),
    "no money at all": ({"qty": 3, "sku": "MUG-1"}, "payload.qty", 4),
}

# The same shapes declared: (the kind's money:, the amount read, its currency).
DECLARED = {
    "nested": ("{amount: payload.amount.value, currency: payload.amount.currency}", "EUR"),
    "list": ("{amount: payload.amount.*, currency: payload.currency}", "USD"),
    "decimal text": (
        "{amount: payload.amount.value, currency: payload.amount.currency_code, minor_units: false}",
        "USD",
    ),
    "unknown word": ("{amount: payload.montant, currency: payload.devise}", "EUR"),
    "run together": ("{amount: payload.refundamount, currency: payload.currency}", "USD"),
    "invisible character": ('{amount: "payload.amo\\uFE0Funt", currency: payload.currency}', "USD"),
}
MONEY_SHAPES = [name for name in SHAPES if name != "no money at all"]


@pytest.fixture
def step_up(settings):
    settings.IMPRI_STEP_UP_CENTS = THRESHOLD


def push(agent, shape: str, kind: str = KIND, editable: bool = False) -> Action:
    payload, path, _ = SHAPES[shape]
    return make_action(agent.agent, kind=kind, payload=payload, editable=[path] if editable else [])


def service_approves(action, **body) -> tuple[int, dict]:
    from tests.conftest import ApiClient

    _, raw = _service_token("rita")
    response = ApiClient(raw).post(f"/actions/{action.pk}/approve", body or None)
    return response.status_code, response.json()


@pytest.fixture
def rita_browser(rita) -> Client:
    client = Client()
    client.force_login(rita.user)
    return client


# --- An undeclared kind: held over every threshold, whatever its payload -------------------------


@pytest.mark.parametrize("shape", SHAPES)
def test_a_service_token_cannot_approve_an_undeclared_kind(agent, rita, step_up, shape):
    action = push(agent, shape)
    status, body = service_approves(action)
    assert (status, body["code"]) == (403, "step_up_required"), body
    assert f"kind '{KIND}' is not declared" in body["detail"] and "kinds:" in body["detail"]
    action.refresh_from_db()
    assert action.status == ActionStatus.PENDING
    event = AuditEvent.objects.filter(event="stepup.refused", action_id=action.pk).get()
    assert event.data["kind_undeclared"] is True


def test_a_service_token_is_refused_even_with_no_step_up_threshold(agent, rita, settings):
    settings.IMPRI_STEP_UP_CENTS = None
    action = push(agent, "no money at all")
    assert service_approves(action)[1]["code"] == "step_up_required"


def test_an_ordinary_reviewer_token_still_approves_an_undeclared_kind(agent, rita, step_up):
    action = push(agent, "nested")
    assert rita.client().post(f"/actions/{action.pk}/approve").status_code == 200


@pytest.mark.parametrize("shape", SHAPES)
def test_slack_cannot_approve_an_undeclared_kind(agent, team, slack, settings, shape):  # noqa: F811
    settings.IMPRI_SLACK_MAX_APPROVE_CENTS = 50_000
    action = push(agent, shape)
    assert click(action, "approve").status_code == 200
    assert Action.objects.get(pk=action.pk).status == ActionStatus.PENDING
    assert f"{KIND} is not declared" in ephemeral_text(slack)


@pytest.mark.parametrize("shape", SHAPES)
def test_the_inbox_asks_for_a_second_factor_for_an_undeclared_kind(
    agent, rita_browser, step_up, shape
):
    action = push(agent, shape)
    page = rita_browser.get(f"/inbox/actions/{action.pk}").content.decode()
    assert 'id="step-up"' in page
    assert f"The kind {KIND} is not declared" in page
    rita_browser.post(
        f"/inbox/actions/{action.pk}/decide",
        {
            "approve-verdict": "approve",
            "approve-payload_sha256": services.payload_sha256(action.payload),
        },
    )
    assert Action.objects.get(pk=action.pk).status == ActionStatus.PENDING


def test_the_inbox_shows_what_the_detector_finds_as_not_declared(agent, rita_browser):
    action = push(agent, "nested")
    page = rita_browser.get(f"/inbox/actions/{action.pk}").content.decode()
    assert "€1,500.00 EUR" in page and "data-not-declared" in page


@pytest.mark.parametrize("shape", SHAPES)
def test_an_auto_approve_rule_routes_an_undeclared_kind_to_review(agent, shape):
    install_rules("rules: [{name: all billing, kind: 'billing.*', then: auto_approve}]")
    action = push(agent, shape)
    assert action.status == ActionStatus.PENDING
    assert action.rule_trace[-1]["why"].startswith("kind not declared")


@pytest.mark.parametrize("shape", SHAPES)
def test_no_number_of_an_undeclared_kind_may_be_raised(agent, rita, shape):
    install_rules(
        "rules: [{name: loose, kind: 'billing.*', then: review, "
        f"edit_bounds: {{{json.dumps(SHAPES[shape][1])}: {{min: null, max: null}}}}}}]"
    )
    action = push(agent, shape, editable=True)
    _, path, raised = SHAPES[shape]
    response = rita.client().post(f"/actions/{action.pk}/approve", {"edits": {path: raised}})
    assert response.status_code == 422, response.content
    assert response.json()["field"] == f"edits.{path}"
    assert Action.objects.get(pk=action.pk).status == ActionStatus.PENDING


def test_a_number_of_an_undeclared_kind_may_still_be_lowered(agent, rita):
    action = push(agent, "unknown word", editable=True)
    response = rita.client().post(
        f"/actions/{action.pk}/approve", {"edits": {"payload.montant": 100_000}}
    )
    assert response.status_code == 200, response.content


def test_money_empty_declares_a_kind_that_moves_no_money(agent, rita, step_up):
    install_rules(
        "rules: [{name: all billing, kind: 'billing.*', then: auto_approve}]\n"
        f"kinds: {{{KIND}: {{money: []}}}}"
    )
    assert push(agent, "no money at all").status == ActionStatus.APPROVED


def test_detect_keeps_the_detector_for_a_migration_period(agent, rita, step_up, settings):
    settings.IMPRI_UNDECLARED_KINDS = "detect"
    install_rules("rules: [{name: all billing, kind: 'billing.*', then: auto_approve}]")
    assert push(agent, "no money at all").status == ActionStatus.APPROVED


# --- The same shapes, declared: read exactly ---------------------------------------------------


@pytest.mark.parametrize("shape", DECLARED)
def test_a_declared_shape_is_read_exactly(agent, rita, step_up, shape):
    money, currency = DECLARED[shape]
    install_rules(f"rules: []\nkinds:\n  {KIND}:\n    money: [{money}]")
    action = push(agent, shape)
    assert (action.amount_minor, action.amount_currency) == (150_000, currency)
    [amount] = action_money.amounts(action)
    assert (amount.minor, amount.currency, amount.declared) == (150_000, currency, True)
    assert service_approves(action)[1]["code"] == "step_up_required"


def test_a_declared_decimal_amount_with_too_many_decimals_is_a_422_naming_the_path(agent):
    install_rules(f"rules: []\nkinds:\n  {KIND}:\n    money: [{DECLARED['decimal text'][0]}]")
    response = agent.client().post(
        "/actions",
        {
            "kind": KIND,
            "title": "Refund",
            "preview": {"format": "plain", "body": "Refund"},
            "payload": {"amount": {"value": "15.001", "currency_code": "USD"}},
        },
    )
    assert response.status_code == 422, response.content
    assert response.json()["field"] == "payload.amount.value"
    assert "at most 2 decimals" in response.json()["detail"]
    assert not Action.objects.exists()


# --- An action's money is its total ----------------------------------------------------------

LINES = "rules: []\nkinds:\n  psp.payout:\n    money: [{amount: payload.lines.*.amount_cents, currency: payload.currency}]"


def ten_lines(agent, **overrides) -> Action:
    payload = {"currency": "USD", "lines": [{"amount_cents": 99_999}] * 10}
    return make_action(agent.agent, kind="psp.payout", payload=payload, editable=[], **overrides)


def test_ten_lines_under_the_threshold_add_up_to_a_step_up(agent, rita, step_up):
    install_rules(LINES)
    action = ten_lines(agent)
    assert (action.amount_minor, action.amount_currency) == (999_990, "USD")
    status, body = service_approves(action)
    assert (status, body["code"], body["amount_cents"]) == (403, "step_up_required", 999_990)


def test_a_budget_adds_the_lines(agent):
    install_rules(
        LINES.replace(
            "rules: []",
            "rules: [{name: payouts, kind: psp.payout, then: auto_approve, "
            "budget: {per: day, sum: amount, max: 1500000}}]",
        )
    )
    first, second = ten_lines(agent), ten_lines(agent)
    assert (first.status, second.status) == (ActionStatus.APPROVED, ActionStatus.PENDING)


def test_amounts_in_two_currencies_are_each_held_to_the_threshold(agent, rita, step_up):
    install_rules(
        "rules: []\nkinds:\n  fx.swap:\n    money: [{amount: payload.sell_cents, currency: "
        "payload.sell_currency}, {amount: payload.buy_cents, currency: payload.buy_currency}]"
    )
    payload = {
        "sell_cents": 90_000,
        "sell_currency": "USD",
        "buy_cents": 80_000,
        "buy_currency": "EUR",
    }
    below = make_action(agent.agent, kind="fx.swap", payload=payload, editable=[])
    assert service_approves(below)[0] == 200
    payload = {**payload, "buy_cents": 100_000}
    above = make_action(agent.agent, kind="fx.swap", payload=payload, editable=[])
    assert service_approves(above)[1]["code"] == "step_up_required"


def test_the_inbox_shows_the_total_and_its_parts(agent, rita_browser):
    install_rules(LINES)
    action = make_action(
        agent.agent,
        kind="psp.payout",
        payload={"currency": "USD", "lines": [{"amount_cents": 100}, {"amount_cents": 250}]},
        editable=[],
    )
    page = rita_browser.get(f"/inbox/actions/{action.pk}").content.decode()
    total = page.split("data-money-total>", 1)[1].split("</p>", 1)[0]
    assert "$3.50 USD" in total and "$1.00 USD" in total and "$2.50 USD" in total
    outcome = page.split('class="outcome">', 1)[1].split("</p>", 1)[0]
    assert "$3.50 USD" in outcome  # what will happen is the total, not its first part


@pytest.mark.parametrize(
    ("payload", "found"),
    [
        ({"amount": 1500, "currency": "usd"}, [("payload.amount", 1500, "USD")]),  # Stripe
        (
            {"amount": {"value": 150_000, "currency": "EUR"}},  # Adyen
            [("payload.amount.value", 150_000, "EUR")],
        ),
        (
            {"amount": {"value": "1500.00", "currency_code": "USD"}},  # PayPal
            [("payload.amount.value", 150_000, "USD")],
        ),
        ({"amount": "10.00", "currency": "USD"}, [("payload.amount", 1000, "USD")]),  # Braintree
        ({"amount": [150_000], "currency": "USD"}, [("payload.amount.0", 150_000, "USD")]),
        ({"amount_cents": "1500.00", "currency": "USD"}, [("payload.amount_cents", 1500, "USD")]),
        (
            {"amount": {"value": "15.001", "currency": "USD"}},
            [("payload.amount.value", None, "USD")],
        ),
    ],
    ids=["stripe", "adyen", "paypal", "braintree", "list", "cents key", "too many decimals"],
)
def test_the_detector_reads_the_money_objects_of_payment_apis(payload, found):
    from rules.detector import detect

    assert [(a.path, a.minor, a.currency) for a in detect(payload)] == found


def test_a_budget_sends_amounts_in_two_currencies_to_review(agent):
    install_rules(
        "rules: [{name: swaps, kind: fx.swap, then: auto_approve, "
        "budget: {per: day, sum: amount, max: 10000000}}]\n"
        "kinds:\n  fx.swap:\n    money: [{amount: payload.sell_cents, currency: "
        "payload.sell_currency}, {amount: payload.buy_cents, currency: payload.buy_currency}]"
    )
    payload = {"sell_cents": 100, "sell_currency": "USD", "buy_cents": 90, "buy_currency": "EUR"}
    action = make_action(agent.agent, kind="fx.swap", payload=payload, editable=[])
    assert action.status == ActionStatus.PENDING
    assert "budget of 'swaps'" in json.dumps(action.rule_trace)


def test_a_major_units_list_element_is_never_shown_as_minor_units(agent):
    # payload.lines.0.value is named by payload.lines.*.value: 10 there is $10, not $0.10.
    install_rules(
        f"rules: []\nkinds:\n  {KIND}:\n    money: [{{amount: payload.lines.*.value, "
        "currency: payload.currency, minor_units: false}]"
    )
    action = make_action(
        agent.agent, kind=KIND, payload={"lines": [{"value": 10}], "currency": "USD"}, editable=[]
    )
    assert action_money.spec_at(action, "payload.lines.0.value").minor_units is False
    assert presenters.money_for_path(action, "payload.lines.0.value", 10) is None
    assert action_money.spec_at(action, "payload.currency") is None
