"""Ways in and out of the inbox: logging out, the favicon, HEAD, the dashboard's refund rows."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from approvals import services
from tests.factories import make_action


@pytest.fixture
def rita_in(rita) -> Client:
    client = Client()
    client.force_login(rita.user)
    return client


@pytest.mark.parametrize("door", ["/accounts/logout/", "/admin/logout/"])
def test_logging_out_lands_on_the_inbox_sign_in_page(db, door):
    client = Client()
    client.force_login(User.objects.create_superuser("olivia", password="olivia-password"))
    page = client.post(door, follow=True)
    assert page.redirect_chain == [("/accounts/login/", 302)]
    html = page.content.decode()
    assert "Log in to review" in html
    assert "Thanks for spending some quality time" not in html
    assert "_auth_user_id" not in client.session


def test_the_favicon_is_the_inboxs_icon(db):
    client = Client()
    answer = client.get("/favicon.ico")
    assert answer.status_code == 301
    assert answer["Location"].endswith("inbox/icons/icon-192.png")
    icon = client.get(answer["Location"])
    assert icon.status_code == 200 and icon["Content-Type"] == "image/png"
    assert b"".join(icon.streaming_content).startswith(b"\x89PNG")
    assert client.head("/favicon.ico").status_code == 301


def test_every_page_names_its_icon(rita_in):
    assert 'rel="icon" type="image/png"' in rita_in.get("/inbox/").content.decode()


@pytest.mark.parametrize("path", ["/inbox/", "/inbox/decided/", "ACTION"])
def test_head_answers_like_get_without_a_body(rita_in, agent, path):
    if path == "ACTION":
        path = f"/inbox/actions/{make_action(agent.agent).pk}"
    get, head = rita_in.get(path), rita_in.head(path)
    assert head.status_code == get.status_code == 200
    assert head["Content-Type"] == get["Content-Type"]
    assert head.content == b""


def test_head_of_the_dashboard_is_a_get_without_a_body(db):
    client = Client()
    client.force_login(User.objects.create_superuser("olivia", password="olivia-password"))
    head = client.head("/inbox/dashboard/")
    assert head.status_code == 200 and head.content == b""


def test_head_without_a_session_is_sent_to_sign_in_as_get_is(db):
    head = Client().head("/inbox/")
    assert head.status_code == 302 and head["Location"].startswith("/accounts/login/")


def test_other_methods_are_still_refused(rita_in):
    assert rita_in.put("/inbox/").status_code == 405


def test_refunded_amounts_are_page_text_beside_their_bars(db, agent):
    olivia = User.objects.create_superuser("olivia", password="olivia-password")
    action = make_action(
        agent.agent, payload={"order_id": "1", "amount_cents": 12345678900, "currency": "USD"}
    )
    services.decide(action.pk, by=olivia, verdict="approve")
    services.report_result(action.pk, agent=agent.agent, status="executed", detail="refunded")
    client = Client()
    client.force_login(olivia)
    html = client.get("/inbox/dashboard/").content.decode()
    assert html.count('<ol class="refund-bars"') == 3
    assert html.count('<span class="money">$123,456,789.00 USD</span>') == 3
    assert html.count("data-scroll-end") == 2  # the two charts by day open on today
