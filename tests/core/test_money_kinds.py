"""Money that Impri understands: kinds declare their amounts, every guard reads the declaration.

The attack (issue 28): an amount spelled other than ``amount_cents`` walked past
step-up, the Slack ceiling and the edit bound. Now a kind declares where its
money is (``kinds:`` in the rules file; ``payment.refund`` and ``payment.charge``
by default). Since issue 39 a kind that declares nothing is held over every
threshold (tests/core/test_money_closed.py); the detector, which normalises keys
and fails closed, guards it only with ``IMPRI_UNDECLARED_KINDS=detect`` (the
migration period), which the tests of undeclared kinds here run under. Each
spelling is tried at each door.
"""

from __future__ import annotations

import hashlib
import json

import pytest
import rfc8785
from django.test import Client
from hypothesis import given, settings
from hypothesis import strategies as st

from approvals import money as action_money
from approvals import services
from approvals.models import Action, ActionStatus
from rules import detector, money
from tests.factories import install_rules, make_action, refund_body
from tests.identity.test_two_factor import _service_token
from tests.slack.test_slack import click, ephemeral_text, slack, team  # noqa: F401  (fixtures)

THRESHOLD = 100_000  # IMPRI_STEP_UP_CENTS: $1,000.00
BIG, SMALL = 150_000, 5_000

# (key, value) pairs that all mean "150,000 minor units" to a payment provider.
SPELLINGS = {
    "upper": ("AMOUNT_CENTS", BIG),
    "title case": ("Amount_Cents", BIG),
    "camelCase": ("amountCents", BIG),
    "zero-width space": ("amount_cents\u200b", BIG),
    "stripe amount": ("amount", BIG),
    "exponent text": ("amount_cents", "1.5e5"),
    "thousands text": ("amount_cents", "150,000"),
    "fullwidth": ("ａｍｏｕｎｔ", BIG),
}
UNDECLARED = "billing.refund"
DECLARED_RULES = """
rules: []
kinds:
  psp.refund:
    schema: {type: object, required: [charge, amount, currency]}
    money:
      - {amount: payload.amount, currency: payload.currency}
"""


@pytest.fixture
def step_up(settings):
    settings.IMPRI_STEP_UP_CENTS = THRESHOLD


@pytest.fixture(autouse=True)
def detect(settings):
    """The detector guards undeclared kinds: the migration period (IMPRI_UNDECLARED_KINDS=detect)."""
    settings.IMPRI_UNDECLARED_KINDS = "detect"


def spelled(key: str, value) -> dict:
    return {"order_id": "10432", key: value, "currency": "USD"}


def service_approves(action) -> tuple[int, dict]:
    _, raw = _service_token("rita")
    from tests.conftest import ApiClient

    response = ApiClient(raw).post(f"/actions/{action.pk}/approve")
    return response.status_code, response.json()


# --- Step-up over REST, with a service token -------------------------------------------------


@pytest.mark.parametrize(("key", "value"), SPELLINGS.values(), ids=SPELLINGS)
def test_every_spelling_of_an_undeclared_amount_needs_step_up(agent, rita, step_up, key, value):
    action = make_action(agent.agent, kind=UNDECLARED, payload=spelled(key, value), editable=[])
    status, body = service_approves(action)
    assert (status, body["code"]) == (403, "step_up_required"), body
    action.refresh_from_db()
    assert action.status == ActionStatus.PENDING


@pytest.mark.parametrize(("key", "value"), [("amountCents", SMALL), ("amount", "5,000")])
def test_a_small_undeclared_amount_passes(agent, rita, step_up, key, value):
    action = make_action(agent.agent, kind=UNDECLARED, payload=spelled(key, value), editable=[])
    assert service_approves(action)[0] == 200


@pytest.mark.parametrize(
    "value",
    ["1,5 €", "lots", True, 8400.505, "84.505"],
    ids=["euro text", "word", "bool", "frac", "dec"],
)
def test_an_undeclared_amount_that_cannot_be_read_counts_as_over_every_limit(
    agent, rita, step_up, value
):
    action = make_action(
        agent.agent, kind=UNDECLARED, payload=spelled("refund_amount", value), editable=[]
    )
    status, body = service_approves(action)
    assert status == 403 and body["amount_cents"] is None
    assert "payload.refund_amount" in body["detail"] and "cannot read" in body["detail"]


@pytest.mark.parametrize("key", ["AMOUNT_CENTS", "amountCents", "amount", "Amount_Cents"])
def test_a_declared_amount_needs_step_up_whatever_its_key(agent, rita, step_up, key):
    install_rules(
        f"rules: []\nkinds: {{acme.refund: {{money: [{{amount: payload.{key}, "
        "currency: payload.currency}]}}"
    )
    big = make_action(agent.agent, kind="acme.refund", payload=spelled(key, BIG), editable=[])
    assert service_approves(big)[1]["code"] == "step_up_required"
    small = make_action(agent.agent, kind="acme.refund", payload=spelled(key, SMALL), editable=[])
    assert service_approves(small)[0] == 200


@pytest.mark.parametrize("value", ["1.5e5", "150,000", 150000.5, True])
def test_a_declared_amount_written_other_than_as_an_integer_is_refused_at_push(agent, value):
    install_rules(DECLARED_RULES)
    response = agent.client().post(
        "/actions", refund_body(kind="psp.refund", payload=psp(value), editable=[])
    )
    assert response.status_code == 422, response.content
    assert response.json()["field"] == "payload.amount"
    assert "must be a positive integer in minor units" in response.json()["detail"]


# --- The Slack ceiling -------------------------------------------------------------------------


@pytest.mark.parametrize(("key", "value"), SPELLINGS.values(), ids=SPELLINGS)
def test_slack_refuses_every_spelling_above_its_ceiling(agent, team, slack, settings, key, value):  # noqa: F811
    settings.IMPRI_SLACK_MAX_APPROVE_CENTS = 50_000
    action = make_action(agent.agent, kind=UNDECLARED, payload=spelled(key, value), editable=[])
    assert click(action, "approve").status_code == 200
    assert Action.objects.get(pk=action.pk).status == ActionStatus.PENDING
    assert "the most that may be approved from Slack" in ephemeral_text(slack)


def test_slack_refuses_a_declared_amount_above_its_ceiling_and_approves_a_small_one(
    agent,
    team,  # noqa: F811
    slack,  # noqa: F811
    settings,
):
    settings.IMPRI_SLACK_MAX_APPROVE_CENTS = 50_000
    install_rules(DECLARED_RULES)
    big = make_action(agent.agent, kind="psp.refund", payload=psp(900_000), editable=[])
    assert click(big, "approve").status_code == 200
    assert Action.objects.get(pk=big.pk).status == ActionStatus.PENDING
    small = make_action(agent.agent, kind="psp.refund", payload=psp(SMALL), editable=[])
    assert click(small, "approve").status_code == 200
    assert Action.objects.get(pk=small.pk).status == ActionStatus.APPROVED


# --- The inbox ----------------------------------------------------------------------------------


@pytest.fixture
def rita_browser(rita) -> Client:
    client = Client()
    client.force_login(rita.user)
    return client


@pytest.mark.parametrize(("key", "value"), SPELLINGS.values(), ids=SPELLINGS)
def test_the_inbox_asks_for_a_second_factor_for_every_spelling(
    agent, rita_browser, step_up, key, value
):
    action = make_action(agent.agent, kind=UNDECLARED, payload=spelled(key, value), editable=[])
    page = rita_browser.get(f"/inbox/actions/{action.pk}").content.decode()
    assert 'id="step-up"' in page and "needs two-factor authentication" in page
    response = rita_browser.post(
        f"/inbox/actions/{action.pk}/decide",
        {
            "approve-verdict": "approve",
            "approve-payload_sha256": services.payload_sha256(action.payload),
        },
    )
    # Nothing approved: the form comes back asking for a second factor (422, like a form error).
    assert response.status_code == 422, response.content[:300]
    assert 'id="step-up-error"' in response.content.decode()
    action.refresh_from_db()
    assert action.status == ActionStatus.PENDING


def test_the_inbox_approves_a_small_amount_without_a_second_factor(agent, rita_browser, step_up):
    action = make_action(
        agent.agent, kind=UNDECLARED, payload=spelled("amountCents", SMALL), editable=[]
    )
    assert (
        'id="stepup-code"' not in rita_browser.get(f"/inbox/actions/{action.pk}").content.decode()
    )
    response = rita_browser.post(
        f"/inbox/actions/{action.pk}/decide",
        {
            "approve-verdict": "approve",
            "approve-payload_sha256": services.payload_sha256(action.payload),
        },
    )
    assert response.status_code in (200, 302), response.content[:300]
    action.refresh_from_db()
    assert action.status == ActionStatus.APPROVED


# --- A declared psp.refund: bounds, budgets, the dashboard ---------------------------------------


def psp(amount, currency="USD") -> dict:
    return {"charge": "ch_3Nabc", "amount": amount, "currency": currency}


def test_a_declared_amount_gets_the_default_bounds(agent, rita):
    install_rules(DECLARED_RULES)
    action = make_action(
        agent.agent, kind="psp.refund", payload=psp(8400), editable=["payload.amount"]
    )
    assert action.edit_bounds == {"payload.amount": {"min": 1, "max": "original"}}
    raised = rita.client().post(
        f"/actions/{action.pk}/approve", {"edits": {"payload.amount": 9000}}
    )
    assert raised.status_code == 422 and raised.json()["field"] == "edits.payload.amount"
    lowered = rita.client().post(
        f"/actions/{action.pk}/approve", {"edits": {"payload.amount": 5000}}
    )
    assert lowered.status_code == 200, lowered.content
    action.refresh_from_db()
    assert (action.payload["amount"], action.amount_minor, action.amount_currency) == (
        5000,
        5000,
        "USD",
    )


def test_a_declared_kinds_schema_is_kept_at_push(agent):
    install_rules(DECLARED_RULES)
    response = agent.client().post(
        "/actions",
        refund_body(kind="psp.refund", payload={"amount": 8400, "currency": "USD"}, editable=[]),
    )
    assert response.status_code == 422
    assert response.json()["field"] == "payload.charge"


def test_a_budget_sums_the_declared_amount(agent):
    install_rules(
        DECLARED_RULES.replace(
            "rules: []",
            "rules:\n  - name: small psp refunds\n    kind: psp.refund\n    then: auto_approve\n"
            "    budget: {per: day, sum: amount, max: 10000}",
        )
    )
    first = make_action(agent.agent, kind="psp.refund", payload=psp(6000), editable=[])
    second = make_action(agent.agent, kind="psp.refund", payload=psp(6000), editable=[])
    assert (first.status, second.status) == (ActionStatus.APPROVED, ActionStatus.PENDING)
    assert "budget of 'small psp refunds'" in json.dumps(second.rule_trace)


def test_the_dashboard_totals_a_declared_refund(agent, rita, settings):
    install_rules(DECLARED_RULES)
    from django.contrib.auth.models import User

    action = make_action(agent.agent, kind="psp.refund", payload=psp(20400), editable=[])
    services.decide(action.pk, by=rita.user, verdict="approve")
    assert (
        agent.client().post(f"/actions/{action.pk}/result", {"status": "executed"}).status_code
        == 200
    )
    lead = User.objects.create_user("lena", password="x-long-password-1", is_staff=True)
    client = Client()
    client.force_login(lead)
    page = client.get("/inbox/dashboard/").content.decode()
    total = page.split('data-figure="refunded">', 1)[1].split("</dd>", 1)[0]
    assert total == "$204.00 USD"


# --- payment.refund keeps its declaration -------------------------------------------------------


@pytest.mark.parametrize(
    ("payload", "field", "words"),
    [
        ({"amount_cents": -500, "currency": "USD"}, "payload.amount_cents", "positive integer"),
        ({"amount_cents": 0, "currency": "USD"}, "payload.amount_cents", "positive integer"),
        ({"amount_cents": 84.5, "currency": "USD"}, "payload.amount_cents", "positive integer"),
        ({"amount_cents": "8400", "currency": "USD"}, "payload.amount_cents", "positive integer"),
        ({"amount_cents": 8400, "currency": "XYZ"}, "payload.currency", "ISO 4217"),
        ({"amount_cents": 8400}, "payload.currency", "ISO 4217"),
        ({"amountCents": 8400, "currency": "USD"}, "payload.amount_cents", "is required"),
    ],
    ids=["negative", "zero", "float", "string", "not iso", "no currency", "other key"],
)
def test_a_refund_that_breaks_its_declaration_is_refused_naming_the_path(
    agent, payload, field, words
):
    response = agent.client().post("/actions", refund_body(payload=payload, editable=[]))
    assert response.status_code == 422, response.content
    assert response.json()["field"] == field
    assert words in response.json()["detail"]
    assert not Action.objects.exists()


def test_an_edit_cannot_break_the_declaration_either(agent, rita):
    install_rules(
        "rules: [{name: r, kind: payment.refund, then: review, "
        "edit_bounds: {payload.amount_cents: {min: null, max: null}}}]"
    )
    action = make_action(agent.agent)
    response = rita.client().post(
        f"/actions/{action.pk}/approve", {"edits": {"payload.amount_cents": -100}}
    )
    assert response.status_code == 422
    assert response.json()["field"] == "edits.payload.amount_cents"


def test_a_kind_of_any_sign_takes_a_negative_adjustment_and_the_inbox_marks_it(agent, rita):
    install_rules(
        "rules: []\nkinds:\n  ledger.adjust:\n    money: [{amount: payload.amount_cents, "
        "currency: payload.currency, sign: any}]"
    )
    action = make_action(
        agent.agent,
        kind="ledger.adjust",
        title="Adjust the ledger by -$5.00",
        preview={"format": "plain", "body": "Correct a double charge: -$5.00."},
        payload={"amount_cents": -500, "currency": "USD"},
        editable=[],
    )
    client = Client()
    client.force_login(rita.user)
    page = client.get(f"/inbox/actions/{action.pk}").content.decode()
    assert '<strong class="money money-negative">-$5.00 USD</strong>' in page
    assert "(negative)" in page
    zero = make_action(
        agent.agent,
        kind="ledger.adjust",
        payload={"amount_cents": 0, "currency": "USD"},
        editable=[],
    )
    assert "(zero)" in client.get(f"/inbox/actions/{zero.pk}").content.decode()


# --- The banner --------------------------------------------------------------------------------


def _banner(agent, rita, words: str) -> str:
    """The action page of a $12.00 refund whose title and preview both say ``words``."""
    action = make_action(
        agent.agent,
        title=words,
        preview={"format": "plain", "body": words + "."},
        payload={"amount_cents": 1200, "currency": "USD"},
        editable=[],
    )
    client = Client()
    client.force_login(rita.user)
    return client.get(f"/inbox/actions/{action.pk}").content.decode()


def test_an_order_total_beside_the_refund_is_context_not_a_disagreement(agent, rita):
    page = _banner(agent, rita, "Refund $12.00 of the $120.00 order")
    assert 'id="amount-warning"' not in page
    assert 'id="amount-context"' in page and "<q>$120.00</q>" in page


def test_a_title_naming_another_amount_than_the_payload_warns(agent, rita):
    page = _banner(agent, rita, "Refund $120.00")
    assert 'id="amount-warning"' in page
    assert "The payload asks to refund <strong>$12.00 USD</strong>" in page


def test_the_right_figure_in_another_currency_warns(agent, rita):
    assert 'id="amount-warning"' in _banner(agent, rita, "Refund EUR 12.00")


# --- Hashes any JCS library reproduces -------------------------------------------------------------

_json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**53) + 1, 2**53 - 1),
    st.floats(allow_nan=False, allow_infinity=False).filter(lambda x: abs(x) <= 2**53 - 1),
    st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), max_size=12),
)
_payloads = st.dictionaries(
    st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), max_size=8),
    st.recursive(
        _json_leaf,
        lambda inner: (
            st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
        ),
        max_leaves=12,
    ),
    max_size=6,
)


@settings(max_examples=300, deadline=None)
@given(payload=_payloads)
def test_payload_sha256_is_the_rfc8785_digest(payload):
    assert services.payload_sha256(payload) == hashlib.sha256(rfc8785.dumps(payload)).hexdigest()


@pytest.mark.parametrize("number", [2**53, 2**53 + 1, -(2**53) - 1, 10**20, 1e300])
def test_a_number_beyond_i_json_is_refused_naming_its_path(agent, number):
    body = refund_body()
    body["payload"]["lines"] = [{"sku": "MUG", "id": "@@N@@"}]
    text = json.dumps(body).replace('"@@N@@"', json.dumps(number))
    response = agent.client().post("/actions", text)
    assert response.status_code == 422, response.content
    assert response.json()["field"] == "payload.lines.0.id"
    assert "as a string" in response.json()["detail"] or "as strings" in response.json()["detail"]


def test_the_largest_safe_integer_is_stored_and_hashed_alike(agent):
    body = refund_body()
    body["payload"]["order_id"] = 2**53 - 1
    response = agent.client().post("/actions", body)
    assert response.status_code == 201, response.content
    stored = Action.objects.get(pk=response.json()["action_id"])
    digest = hashlib.sha256(rfc8785.dumps(stored.payload)).hexdigest()
    assert response.json()["payload_sha256"] == digest


# --- The rules file's kinds: --------------------------------------------------------------------


def test_kinds_are_imported_exported_and_versioned_with_the_rules(db):
    from rules import services as rule_services

    version = install_rules(DECLARED_RULES)
    exported = rule_services.export_yaml()
    assert "psp.refund" in exported and "payload.amount" in exported
    assert (
        rule_services.parse_file(exported).kinds == rule_services.parse_file(DECLARED_RULES).kinds
    )
    assert "psp.refund" in rule_services.rules_at(version).yaml
    install_rules("rules: []")
    assert rule_services.current_rules().kinds == {}
    assert rule_services.current_rules().declaration("payment.refund") is not None


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("kinds: {psp.refund: {money: [{amount: amount, currency: USD}]}}", "money[0].amount"),
        (
            "kinds: {psp.refund: {money: [{amount: payload.a, currency: Dollars}]}}",
            "money[0].currency",
        ),
        (
            "kinds: {psp.refund: {money: [{amount: payload.a, currency: USD, sign: up}]}}",
            "money[0].sign",
        ),
        (
            "kinds: {psp.refund: {money: [{amount: payload.a, currency: USD, minor_units: 1}]}}",
            "minor_units",
        ),
        ("kinds: {psp.refund: {schema: {type: 12}}}", "schema"),
        ("kinds: {psp.refund: {colour: red}}", "colour"),
        ("kinds: {'psp refund': {}}", "psp refund"),
    ],
)
def test_a_malformed_kind_is_refused_naming_it_and_the_part(text, where):
    from rules import engine
    from rules import services as rule_services

    with pytest.raises(engine.RuleError) as refused:
        rule_services.parse_file(text)
    assert str(refused.value).startswith("kinds: ") and where in str(refused.value)


# --- The detector, pure ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "is_money"),
    [
        ("amount_cents", True),
        ("AMOUNT_CENTS", True),
        ("amountCents", True),
        ("Amount_Cents", True),
        ("amount_cents\u200b", True),
        ("amount", True),
        ("refund_amount", True),
        ("total_minor", True),
        ("ａｍｏｕｎｔ", True),
        ("order_id", False),
        ("percent", False),
        ("currency", False),
    ],
)
def test_the_detector_reads_a_key_by_its_meaning(key, is_money):
    assert detector.is_money_key(key) is is_money


def test_the_detector_finds_nested_money_with_its_currency():
    found = list(detector.detect({"lines": [{"unitAmount": "1,200", "currency": "eur"}], "qty": 3}))
    assert [(a.path, a.minor, a.currency) for a in found] == [
        ("payload.lines.0.unitAmount", 1200, "EUR")
    ]


def test_a_declaration_is_read_and_nothing_else():
    specs = [money.MoneySpec("payload.amount", "USD")]
    found = money.amounts({"payload": {"amount": 700, "amount_cents": 10**6}}, specs)
    assert [(a.path, a.minor, a.currency) for a in found] == [("payload.amount", 700, "USD")]


def test_major_units_are_read_into_minor_units():
    specs = [money.MoneySpec("payload.total", "payload.currency", minor_units=False)]
    [amount] = money.amounts({"payload": {"total": 12.5, "currency": "JPY"}}, specs)
    assert amount.minor is None  # half a yen is not a whole number of minor units
    [amount] = money.amounts({"payload": {"total": 12.5, "currency": "USD"}}, specs)
    assert (amount.minor, str(amount.money)) == (1250, "$12.50 USD")


def test_money_reads_one_way_everywhere():
    assert str(action_money.Money(20400, "USD")) == "$204.00 USD"
    assert str(action_money.Money(-500, "USD")) == "-$5.00 USD"
    assert str(action_money.Money(1200, "JPY")) == "¥1,200 JPY"


# --- The CLI and the admin's YAML editor --------------------------------------------------------


def _run(*args) -> str:
    from io import StringIO

    from django.core.management import call_command

    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def test_rules_test_prints_the_amounts_in_their_currency_and_a_refusal(tmp_path, db):
    rules_file = tmp_path / "rules.yaml"
    rules_file.write_text(DECLARED_RULES)
    action = tmp_path / "action.json"
    action.write_text(json.dumps({"kind": "psp.refund", "payload": psp(8400)}))
    assert "amounts: payload.amount = $84.00 USD (declared by psp.refund)" in _run(
        "rules", "test", str(rules_file), "--action", str(action)
    )
    action.write_text(
        json.dumps({"kind": "psp.refund", "payload": {"amount": -5, "currency": "USD"}})
    )
    output = _run("rules", "test", str(rules_file), "--action", str(action))
    assert "refused at push: payload.charge:" in output
    action.write_text(json.dumps({"kind": "billing.refund", "payload": {"amountCents": "1,5 €"}}))
    output = _run("rules", "test", str(rules_file), "--action", str(action))
    assert "payload.amountCents is the text" in output and "(found by the detector;" in output


def test_rules_import_takes_the_kinds_and_export_gives_them_back(tmp_path, db):
    rules_file = tmp_path / "rules.yaml"
    rules_file.write_text(DECLARED_RULES)
    assert "and 1 kind(s)" in _run("rules", "import", str(rules_file))
    assert "psp.refund" in _run("rules", "export")


def test_the_admin_yaml_editor_previews_and_saves_kinds(db):
    from django.contrib.auth.models import User

    from rules import services as rule_services
    from rules.models import RuleSet

    olivia = User.objects.create_superuser("olivia", "o@example.com", "olivia-password-1")
    client = Client()
    client.force_login(olivia)
    install_rules("rules: []")
    version = RuleSet.objects.get().version
    preview = client.post("/admin/rules/rule/yaml/", {"rules_yaml": DECLARED_RULES, "preview": "1"})
    html = preview.content.decode()
    assert "declarations change" in html and "+kinds:" in html
    saved = client.post(
        "/admin/rules/rule/yaml/",
        {"rules_yaml": DECLARED_RULES, "save": "1", "previewed_version": str(version)},
    )
    assert saved.status_code == 302
    assert "psp.refund" in rule_services.current_rules().kinds
    bad = client.post(
        "/admin/rules/rule/yaml/",
        {
            "rules_yaml": "kinds: {psp.refund: {money: [{amount: x, currency: USD}]}}",
            "preview": "1",
        },
    )
    assert "kinds: psp.refund.money[0].amount" in bad.content.decode()
