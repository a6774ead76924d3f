"""Amount spoofing in the inbox: what breaks the money convention is said, never silently dropped.

``payment.refund`` declares its money, so a push that breaks it is refused
(tests/core/test_money_kinds.py); these actions are of a kind that declares none,
whose money the detector reads and the inbox must still show truthfully. Such a
kind is held over every limit (issue 39): the first warning says so, and what
the detector finds follows it.
"""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.test import Client

from approvals import money as action_money
from approvals.models import Action
from inbox import presenters
from tests.conftest import make_reviewer
from tests.factories import make_action, refund_body

TITLE = "Refund $84.00 on order 10432"
KIND = "billing.refund"  # declares nothing: the detector reads it


def action_with(payload: dict, **fields) -> Action:
    base = {"kind": KIND, "title": TITLE, "preview_body": "Refund **$84.00**."}
    return Action(payload=payload, original_payload=payload, **{**base, **fields})


def detected_warnings(action: Action) -> list[str]:
    """The warnings about what the detector found, after the one that the kind is not declared."""
    first, *rest = presenters.money_warnings(action)
    assert first.startswith(f"The kind {KIND} is not declared"), first
    return rest


@pytest.mark.parametrize(
    ("amount", "words"),
    [
        ("840000", 'the text "840000"'),
        (840000.0, "the number 840000.0"),
        (8400.5, "the number 8400.5"),
        ("840,000", 'the text "840,000"'),
    ],
)
def test_a_non_integer_amount_warns_and_still_checks_the_title(amount, words):
    action = action_with({"amount_cents": amount, "currency": "USD"})
    warnings = detected_warnings(action)
    assert len(warnings) == 1 and warnings[0].startswith(f"payload.amount_cents is {words}")
    assert presenters.amount_mismatches(action), "the mismatch check must still run"


def test_a_fraction_of_a_cent_is_shown_not_rounded_away():
    money = action_money.primary(action_with({"amount_cents": 8400.5, "currency": "USD"}))
    assert (money.major, str(money)) == (Decimal("84.005"), "$84.005 USD")


def test_a_text_amount_that_matches_the_title_still_warns():
    action = action_with({"amount_cents": "8400", "currency": "USD"})
    assert presenters.amount_mismatches(action) == []
    assert presenters.money_warnings(action)


@pytest.mark.parametrize(
    "currency", ["usd\u202e", "usd (= $84.00 after store credit)", "XXX", "US$", "", 840]
)
def test_a_currency_that_is_not_iso_4217_is_not_written_into_the_money_line(currency):
    action = action_with({"amount_cents": 8400, "currency": currency})
    money = action_money.primary(action)
    assert str(money) == "84.00"
    assert any("not an ISO 4217" in w for w in presenters.money_warnings(action))


@pytest.mark.parametrize(("currency", "text"), [("usd", "$84.00 USD"), ("JPY", "¥8,400 JPY")])
def test_an_iso_currency_is_read_in_any_case(currency, text):
    action = action_with({"amount_cents": 8400, "currency": currency})
    assert str(action_money.primary(action)) == text
    assert detected_warnings(action) == []


def test_cents_without_a_currency_warn():
    action = action_with({"amount_cents": 8400})
    assert detected_warnings(action) == [
        "payload.amount_cents is in no ISO 4217 currency (the payload names no currency, "
        "e.g. payload.currency): the amount's unit is unknown"
    ]


# --- Through the pages --------------------------------------------------------------------


@pytest.fixture
def rita_browser(rita) -> Client:
    client = Client()
    client.force_login(rita.user)
    return client


def page(client: Client, action: Action) -> str:
    response = client.get(f"/inbox/actions/{action.pk}")
    assert response.status_code == 200
    return response.content.decode()


def test_a_string_amount_shows_the_money_line_the_mismatch_and_the_warning(agent, rita_browser):
    action = make_action(
        agent.agent, kind=KIND, payload={"amount_cents": "840000", "currency": "USD"}
    )
    body = page(rita_browser, action)
    assert 'id="money-warning"' in body
    assert "payload.amount_cents is the text &quot;840000&quot;" in body
    assert 'id="amount-warning"' in body  # "$84.00" in the title is not $8,400.00
    assert '<strong class="money">$8,400.00 USD</strong>' in body
    queue = rita_browser.get("/inbox/").content.decode()
    assert "check amount" in queue and "amount differs" in queue


def test_a_bidi_currency_is_revealed_and_kept_out_of_the_money_line(agent, rita_browser):
    action = make_action(
        agent.agent,
        kind=KIND,
        payload={"amount_cents": 8400, "currency": "usd\u202e", "order_id": "10432"},
    )
    body = page(rita_browser, action)
    assert "\u202e" not in body
    assert "U+202E" in body
    assert '<strong class="money">84.00</strong>' in body


def test_a_prose_currency_is_not_written_into_the_money_line(agent, rita_browser):
    action = make_action(
        agent.agent,
        kind=KIND,
        payload={"amount_cents": 8400, "currency": "usd (= $84.00 after store credit)"},
    )
    body = page(rita_browser, action)
    assert '<strong class="money">84.00</strong>' in body
    assert "USD (= $84.00" not in body
    assert "not an ISO 4217 currency code" in body


def test_a_decoy_editable_path_is_revealed_in_its_label(agent, rita_browser):
    decoy = "amount\u200b_cents"
    payload = {"amount_cents": 840000, decoy: 8400, "currency": "USD"}
    action = make_action(agent.agent, payload=payload, editable=[f"payload.{decoy}"])
    body = page(rita_browser, action)
    label = body.split('class="field edit-field', 1)[1].split("</label>", 1)[0]
    assert "<code>payload.<wbr>amount_cents</code>" not in label
    assert (
        'payload.<wbr>amount<span class="hidden-char" title="ZERO WIDTH SPACE">U+200B</span>_cents'
        in label
    )
    assert "hidden characters in this path" in label


def test_the_decoy_edit_changes_only_the_decoy_field(agent, rita):
    decoy = "amount\u200b_cents"
    payload = {"amount_cents": 840000, decoy: 8400, "currency": "USD"}
    action = make_action(agent.agent, payload=payload, editable=[f"payload.{decoy}"])
    client = Client()
    client.force_login(rita.user)
    response = client.post(
        f"/inbox/actions/{action.pk}/decide",
        {"approve-verdict": "approve", f"approve-payload.{decoy}": "5000"},
    )
    assert response.status_code in (200, 302)
    action.refresh_from_db()
    assert action.payload["amount_cents"] == 840000  # what the agent will actually refund
    # …which is why the page said so, in the mismatch warning, before anyone approved.
    assert presenters.amount_mismatches(action)


def test_a_label_elsewhere_is_revealed(agent, rita_browser):
    action = make_action(
        agent.agent,
        **{**refund_body(), "context": {"note\u202e": "x"}},
    )
    assert "U+202E" in page(rita_browser, action)


def test_reviewers_outside_the_group_do_not_see_it(agent, db):
    action = make_action(agent.agent)
    outsider = make_reviewer("olga", "marketing")
    client = Client()
    client.force_login(outsider.user)
    assert client.get(f"/inbox/actions/{action.pk}").status_code == 404
