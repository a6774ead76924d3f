"""Pure helpers behind the inbox: safe rendering of agent text, money, claims, cursors."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest

from approvals.models import Action
from inbox import presenters, queries, render


@pytest.mark.parametrize(
    ("source", "forbidden"),
    [
        ("<script>alert(1)</script>", "<script"),
        ("<img src=x onerror=alert(1)>", "<img"),
        ("<svg onload=alert(1)>", "<svg"),
        ("[x](javascript:alert(1))", 'href="javascript'),
        ("[x](JaVaScRiPt:alert(1))", "href="),
        ("[x](data:text/html,hi)", "href="),
        ("[x](/relative/path)", "href="),
        ("<https://ok.example/x>", '<a href="https://ok.example/x">'),  # rel is always added
        ("![x](https://tracker.example/p.png)", "<img"),
        ('```js" onmouseover=alert(1)\ncode\n```', "onmouseover=alert"),
        ('[t](https://a.example "ti\u202etle")', "title="),
    ],
)
def test_markdown_keeps_nothing_that_could_run_or_mislead(source, forbidden):
    assert forbidden not in render.markdown(source)


def test_markdown_links_keep_http_and_get_noopener():
    html = render.markdown("[shop](https://shop.example/o/1) and **bold**")
    assert '<a href="https://shop.example/o/1" rel="noopener noreferrer">shop</a>' in html
    assert "<strong>bold</strong>" in html


def test_reveal_escapes_and_labels_hidden_characters():
    html = render.reveal("a\u202eb<i>\u200b\U000e0041\x07")
    assert "&lt;i&gt;" in html
    for label in ("U+202E", "U+200B", "U+E0041", "U+0007"):
        assert f">{label}</span>" in html
    assert "\u202e" not in html


def test_reveal_leaves_plain_text_and_newlines_alone():
    assert render.reveal("Line one\n\tLine two — café") == "Line one\n\tLine two — café"


def test_only_http_urls_become_links():
    assert render.http_url("https://shop.example/x") == "https://shop.example/x"
    assert render.http_url("javascript:alert(1)") == ""
    assert render.http_url("https://shop.example/\u202ex") == ""


@pytest.mark.parametrize(
    ("minor", "currency", "text"),
    [
        (8400, "USD", "$84.00 USD"),
        (123456, "JPY", "¥123,456 JPY"),
        (1234, "KWD", "1.234 KWD"),
        (5, "CHF", "0.05 CHF"),
    ],
)
def test_money_uses_the_currency_minor_units(minor, currency, text):
    assert str(presenters.Money(minor, currency)) == text


@pytest.mark.parametrize(
    ("text", "amounts"),
    [
        ("Refund $84.00 on order 10432", [("84.00", "USD")]),
        ("Refund USD 1,234.50 now", [("1234.50", "USD")]),
        ("pay 84 euros and 12 usd", [("84.0", "EUR"), ("12.0", "USD")]),
        ("ORDER 10432, SKU 1234, 3 items", []),
    ],
)
def test_mentions_find_written_amounts(text, amounts):
    found = [(str(m.amount), m.currency) for m in presenters.mentions("title", text)]
    assert [(str(Decimal(a)), c) for a, c in amounts] == found


def _action(title: str, body: str = "", cents: int = 8400, currency: str = "USD") -> Action:
    payload = {"amount_cents": cents, "currency": currency, "order_id": "1"}
    return Action(
        kind="payment.refund",
        title=title,
        preview_body=body,
        payload=payload,
        original_payload=payload,
    )


def test_a_claim_that_differs_from_the_payload_is_reported():
    assert [m.text for m in presenters.amount_mismatches(_action("Refund $8.40"))] == ["$8.40"]
    assert presenters.amount_mismatches(_action("Refund $84", "Refund **$84.00**")) == []
    assert [m.text for m in presenters.amount_mismatches(_action("Refund €84"))] == ["€84"]
    assert presenters.amount_mismatches(_action("Refund $84", currency="CAD")) == []


def test_bounds_resolve_original_to_what_the_agent_asked():
    action = _action("x")
    action.edit_bounds = {"payload.amount_cents": {"min": 1, "max": "original"}}
    bounds = presenters.bounds(action, "payload.amount_cents")
    assert [(b.name, b.value, str(b.money), b.is_original) for b in bounds] == [
        ("min", 1, "$0.01 USD", False),
        ("max", 8400, "$84.00 USD", True),
    ]


def test_cursors_round_trip_and_refuse_forgeries():
    moment = datetime(2026, 12, 2, 11, 0, 0, 123456, tzinfo=UTC)
    assert queries.decode_cursor(queries.encode_cursor(moment, "act_x")) == (moment, "act_x")
    for forged in ("", "nonsense", "bm8tcGlwZQ", "MjAyNi0xMi0wMlQxMTowMDowMHxhY3Rf"):
        assert queries.decode_cursor(forged) is None
