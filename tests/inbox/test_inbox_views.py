"""The reviewer inbox through Django's test client: every page, permission and form error."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
import time_machine
from django.contrib.auth.models import Group
from django.core.cache import cache
from django.test import Client
from django.utils import timezone

from approvals import services
from approvals.models import Action, ActionStatus
from inbox import queries
from rules import services as rules
from tests.factories import make_action

HTMX = {"HX-Request": "true"}


def browser(persona) -> Client:
    client = Client()
    client.force_login(persona.user)
    return client


def html(response) -> str:
    return response.content.decode()


def use_rules(text: str) -> None:
    rules.replace_rules(rules.parse_yaml(text), by="test", create_groups=True)


REVIEW_WITH_BOUNDS = """
rules:
  - name: payments need review
    kind: payment.*
    then: review
    group: reviewers
    edit_bounds: {payload.amount_cents: {min: 1, max: original}}
    approvals_required: %d
"""


@pytest.fixture(autouse=True)
def _fresh_kind_menu():
    # The kind menu is cached for a minute; each test starts with its own kinds.
    cache.delete("inbox:kinds")


@pytest.fixture
def action(agent) -> Action:
    return make_action(agent.agent)


@pytest.fixture
def rita_browser(rita) -> Client:
    return browser(rita)


# --- Login ----------------------------------------------------------------------------


def test_queue_sends_strangers_to_the_login_page(db):
    response = Client().get("/inbox/")
    assert response.status_code == 302
    assert response["Location"] == "/accounts/login/?next=/inbox/"


def test_reviewer_logs_in_with_a_password_and_lands_on_the_queue(rita):
    client = Client()
    page = client.get("/accounts/login/?next=/inbox/")
    assert page.status_code == 200
    assert 'name="csrfmiddlewaretoken"' in html(page)
    response = client.post(
        "/accounts/login/", {"username": "rita", "password": "rita-password", "next": "/inbox/"}
    )
    assert response.status_code == 302
    assert response["Location"] == "/inbox/"
    cookie = response.cookies["sessionid"]
    assert cookie["httponly"] is True
    assert cookie["samesite"] == "Lax"
    assert client.get("/inbox/").status_code == 200


def test_a_wrong_password_is_refused_with_a_message(rita):
    client = Client()
    response = client.post("/accounts/login/", {"username": "rita", "password": "nope"})
    assert response.status_code == 200
    assert "alert-error" in html(response)
    assert "_auth_user_id" not in client.session
    assert client.get("/inbox/").status_code == 302  # still sent to the login page


def test_logging_in_needs_the_csrf_token(rita):
    client = Client(enforce_csrf_checks=True)
    response = client.post("/accounts/login/", {"username": "rita", "password": "rita-password"})
    assert response.status_code == 403


# --- The queue ------------------------------------------------------------------------------


def test_queue_lists_pending_actions_from_my_groups(action, rita_browser):
    response = rita_browser.get("/inbox/")
    assert response.status_code == 200
    body = html(response)
    assert f'id="row-{action.pk}"' in body
    assert "Refund $84.00 on order 10432" in body
    assert "$84.00 USD" in body
    assert "1</strong> pending for you" in body


def test_an_outsider_sees_an_empty_queue(action, mallory):
    body = html(browser(mallory).get("/inbox/"))
    assert action.pk not in body
    assert "Nothing is waiting for you" in body


def test_a_superuser_sees_every_group(action, db):
    from django.contrib.auth.models import User

    boss = User.objects.create_superuser("boss", password="x")
    client = Client()
    client.force_login(boss)
    assert action.pk in html(client.get("/inbox/"))


def test_queue_leaves_out_decided_and_overdue_actions(agent, rita, rita_browser):
    decided = make_action(agent.agent, title="Decided one")
    services.decide(decided.pk, by=rita.user, verdict="reject")
    overdue = make_action(agent.agent, title="Overdue one", expires_in_s=60)
    waiting = make_action(agent.agent, title="Waiting one")
    with time_machine.travel(timezone.now() + timedelta(minutes=5)):
        body = html(rita_browser.get("/inbox/"))
    assert waiting.pk in body
    assert decided.pk not in body
    assert overdue.pk not in body


@pytest.fixture
def mixed(agent, other_agent, rita):
    """Four actions that differ in kind, agent, group, amount and age."""
    finance = Group.objects.create(name="finance")
    rita.user.groups.add(finance)
    old = timezone.now() - timedelta(hours=30)
    with time_machine.travel(old, tick=False):
        aged = make_action(agent.agent, title="Old refund", expires_in_s=7 * 86400)
    small = make_action(agent.agent, title="Small refund", payload={**_payload(500)})
    email = make_action(
        other_agent.agent,
        kind="email.send",
        title="Email the customer",
        payload={"to": "a@example.com"},
        editable=[],
    )
    big = make_action(agent.agent, title="Big refund", payload={**_payload(90000)})
    Action.objects.filter(pk=big.pk).update(review_group=finance)
    return {"aged": aged, "small": small, "email": email, "big": big, "finance": finance}


def _payload(cents: int) -> dict:
    return {"order_id": "1", "amount_cents": cents, "currency": "USD"}


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("kind=email.send", {"email"}),
        ("agent=other-bot", {"email"}),
        ("age=gt24h", {"aged"}),
        ("age=lt1h", {"small", "email", "big"}),
        ("amount_min=100", {"big"}),
        ("amount_min=84", {"aged", "big"}),
        ("amount_min=10&amount_max=100", {"aged"}),
        ("amount_max=5", {"small"}),
        ("q=small", {"small"}),
        ("q=EMAIL", {"email"}),
        ("q=other-bot", {"email"}),
    ],
)
def test_queue_filters(mixed, rita_browser, query, expected):
    body = html(rita_browser.get(f"/inbox/?{query}"))
    shown = {name for name, action in mixed.items() if name != "finance" and action.pk in body}
    assert shown == expected


def test_queue_filters_by_group(mixed, rita_browser):
    body = html(rita_browser.get(f"/inbox/?group={mixed['finance'].pk}"))
    assert mixed["big"].pk in body
    assert mixed["small"].pk not in body


def test_search_finds_an_action_by_its_id(mixed, rita_browser):
    body = html(rita_browser.get(f"/inbox/?q={mixed['small'].pk}"))
    assert mixed["small"].pk in body
    assert mixed["big"].pk not in body


def test_counts_show_totals_and_matches_and_menus_list_the_choices(mixed, rita_browser):
    body = html(rita_browser.get("/inbox/?kind=payment.refund"))
    assert "4</strong> pending for you" in body
    assert "3</strong> matching the filters" in body
    assert '<option value="payment.refund" selected>payment.refund</option>' in body
    assert '<option value="email.send">email.send</option>' in body
    assert '<option value="other-bot">other-bot</option>' in body


def test_counts_stop_at_the_cap(agent, rita_browser, monkeypatch):
    monkeypatch.setattr(queries, "COUNT_CAP", 2)
    for _ in range(3):
        make_action(agent.agent)
    assert "2+</strong> pending for you" in html(rita_browser.get("/inbox/"))


def test_a_bad_filter_value_is_dropped_and_said(mixed, rita_browser):
    response = rita_browser.get("/inbox/?amount_min=lots")
    assert response.status_code == 200
    body = html(response)
    assert "filter ignored" in body
    assert mixed["small"].pk in body


def test_urgent_order_puts_the_soonest_expiry_first(agent, rita_browser):
    later = make_action(agent.agent, title="Later", expires_in_s=7200)
    sooner = make_action(agent.agent, title="Sooner", expires_in_s=600)
    newest = html(rita_browser.get("/inbox/"))
    urgent = html(rita_browser.get("/inbox/?sort=urgent"))
    assert newest.index(sooner.pk) < newest.index(later.pk)  # pushed last, so first
    assert urgent.index(sooner.pk) < urgent.index(later.pk)
    make_action(agent.agent, title="Latest but relaxed", expires_in_s=9000)
    urgent = html(rita_browser.get("/inbox/?sort=urgent"))
    assert urgent.index("Sooner") < urgent.index("Later") < urgent.index("Latest but relaxed")


def test_keyset_pages_walk_every_action_once(agent, rita_browser, monkeypatch):
    monkeypatch.setattr(queries, "PAGE_SIZE", 3)
    now = timezone.now()
    pushed = []
    for minute in range(8):
        # Two actions share each timestamp, so the id must break ties.
        with time_machine.travel(now - timedelta(minutes=minute // 2), tick=False):
            pushed.append(make_action(agent.agent, title=f"Action {minute}").pk)
    seen, url = [], "/inbox/"
    for _ in range(5):
        body = html(rita_browser.get(url))
        seen += re.findall(r'id="row-(act_\w+)"', body)
        more = re.search(r'<li id="more".*?href="([^"]+)"', body, re.S)
        if not more:
            break
        url = "/inbox/" + more.group(1).replace("&amp;", "&")
    assert sorted(seen) == sorted(pushed)
    assert len(seen) == len(set(seen)) == 8
    ordered = list(
        Action.objects.filter(pk__in=pushed)
        .order_by("-created_at", "-id")
        .values_list("pk", flat=True)
    )
    assert seen == ordered


def test_a_forged_cursor_starts_from_the_top(action, rita_browser):
    body = html(rita_browser.get("/inbox/?after=not-a-cursor"))
    assert action.pk in body


def test_htmx_filter_request_gets_the_results_fragment_with_counts(mixed, rita_browser):
    response = rita_browser.get(
        "/inbox/?kind=email.send", headers={**HTMX, "HX-Target": "queue-results"}
    )
    body = html(response)
    assert "<html" not in body
    assert body.lstrip().startswith("<section") or 'id="queue-results"' in body
    assert mixed["email"].pk in body
    assert mixed["small"].pk not in body
    assert 'id="queue-counts"' in body and 'hx-swap-oob="true"' in body


def test_htmx_load_more_gets_only_rows(agent, rita_browser, monkeypatch):
    monkeypatch.setattr(queries, "PAGE_SIZE", 2)
    for n in range(3):
        make_action(agent.agent, title=f"Row {n}")
    first = html(rita_browser.get("/inbox/"))
    href = re.search(r'<li id="more".*?href="([^"]+)"', first, re.S).group(1).replace("&amp;", "&")
    more = html(rita_browser.get("/inbox/" + href, headers={**HTMX, "HX-Target": "more"}))
    assert "<html" not in more and 'id="queue-counts"' not in more
    assert more.count('class="row ') == 1
    assert "Row 0" in more


def test_counts_fragment_refreshes_alone(action, rita_browser):
    body = html(rita_browser.get("/inbox/", headers={**HTMX, "HX-Target": "queue-counts"}))
    assert 'id="queue-counts"' in body
    assert "row-" not in body


def test_live_row_request_answers_one_row_or_nothing(mixed, rita_browser, mallory):
    small = mixed["small"].pk
    one = html(rita_browser.get(f"/inbox/?only={small}", headers=HTMX))
    assert one.count('class="row ') == 1 and small in one
    filtered_out = html(rita_browser.get(f"/inbox/?only={small}&kind=email.send", headers=HTMX))
    assert small not in filtered_out
    assert small not in html(browser(mallory).get(f"/inbox/?only={small}", headers=HTMX))


def test_the_queue_refuses_posts(rita_browser):
    assert rita_browser.post("/inbox/").status_code == 405


# --- History ---------------------------------------------------------------------------------


def test_decided_history_shows_outcome_and_who(agent, rita, sam, rita_browser):
    approved = make_action(agent.agent, title="Approved one")
    rejected = make_action(agent.agent, title="Rejected one")
    pending = make_action(agent.agent, title="Still pending")
    services.decide(approved.pk, by=sam.user, verdict="approve")
    services.decide(rejected.pk, by=rita.user, verdict="reject", note="no")
    body = html(rita_browser.get("/inbox/decided/"))
    assert approved.pk in body and rejected.pk in body and pending.pk not in body
    assert body.index(rejected.pk) < body.index(approved.pk)  # latest decision first
    assert "by sam" in body and "by rita" in body
    only_rejected = html(rita_browser.get("/inbox/decided/?status=rejected"))
    assert rejected.pk in only_rejected and approved.pk not in only_rejected
    mine = html(rita_browser.get("/inbox/decided/?mine=1"))
    assert rejected.pk in mine and approved.pk not in mine


def test_history_includes_actions_that_expired_before_the_sweep(agent, rita_browser):
    overdue = make_action(agent.agent, expires_in_s=60)
    with time_machine.travel(timezone.now() + timedelta(minutes=2)):
        body = html(rita_browser.get("/inbox/decided/?status=expired"))
    assert overdue.pk in body
    assert "by expiry" in body


def test_history_is_limited_to_my_groups(action, rita, mallory):
    services.decide(action.pk, by=rita.user, verdict="approve")
    assert action.pk not in html(browser(mallory).get("/inbox/decided/"))


# --- The action page -----------------------------------------------------------------------


def test_action_page_shows_what_will_happen_beside_what_the_agent_says(action, rita_browser):
    response = rita_browser.get(f"/inbox/actions/{action.pk}")
    assert response.status_code == 200
    body = html(response)
    assert 'Refund <strong class="money">$84.00 USD</strong>' in body
    assert "on order <strong>10432</strong>" in body
    assert (
        '<a href="https://shop.example.com/admin/orders/10432" target="_blank" '
        'rel="noopener noreferrer">' in body
    )
    assert "Refund <strong>$84.00</strong> to the card on file." in body  # markdown preview
    assert "The mug arrived broken." in body  # context
    assert "Customer message" in body
    assert "action.pushed" in body  # history
    assert "No rule matched" in body
    assert "support-bot" in body
    assert 'class="countdown countdown-big"' in body
    # The amount's input says its currency and what it takes; the path is secondary, and the
    # minor units the payload will carry are shown under the input as it changes (issue 43).
    assert (
        '<label for="id_approve-payload.amount_cents">Amount (USD) <span class="muted '
        'label-secondary"><code>payload.<wbr>amount_cents</code></span></label>' in body
    )
    assert 'data-path="payload.amount_cents">payload.<wbr>amount_cents = 8400</output>' in body
    assert re.search(
        r'<button[^>]*>Approve <span class="approve-amount" '
        r'data-money-for="id_approve-payload.amount_cents" data-money-bare>\$84.00 USD</span></button>',
        body,
    )
    assert re.search(r"<button[^>]*>Reject</button>", body)


def test_action_page_names_the_rule_and_shows_the_bounds(agent, rita_browser):
    use_rules(REVIEW_WITH_BOUNDS % 1)
    action = make_action(agent.agent)
    body = html(rita_browser.get(f"/inbox/actions/{action.pk}"))
    assert "Routed by rule <strong>payments need review</strong>" in body
    assert "min $0.01 USD" in body
    assert "max $84.00 USD (what the agent asked)" in body


def test_action_page_is_404_outside_my_groups(action, mallory):
    assert browser(mallory).get(f"/inbox/actions/{action.pk}").status_code == 404


def test_an_unknown_action_is_404(rita_browser, db):
    assert rita_browser.get("/inbox/actions/act_nope").status_code == 404


def test_action_page_needs_login(action):
    response = Client().get(f"/inbox/actions/{action.pk}")
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")


def test_a_title_that_disagrees_with_the_payload_is_flagged(agent, rita_browser):
    action = make_action(agent.agent, title="Refund $8.40 on order 10432")
    body = html(rita_browser.get(f"/inbox/actions/{action.pk}"))
    assert 'id="amount-warning"' in body
    assert "the title says <q>$8.40</q>" in body
    assert "You approve the payload, not the agent's words." in body
    assert "amount differs" in html(rita_browser.get("/inbox/"))


def test_a_preview_that_disagrees_with_the_payload_is_flagged(agent, rita_browser):
    action = make_action(
        agent.agent, preview={"format": "plain", "body": "Refund 840 dollars to the customer."}
    )
    body = html(rita_browser.get(f"/inbox/actions/{action.pk}"))
    assert "the preview says <q>840 dollars</q>" in body


def test_matching_words_raise_no_warning(action, rita_browser):
    assert 'id="amount-warning"' not in html(rita_browser.get(f"/inbox/actions/{action.pk}"))


HOSTILE = "<script>alert(1)</script><img src=x onerror=alert(2)><svg onload=alert(3)>"


def test_agent_text_is_escaped_everywhere(agent, rita_browser):
    action = make_action(
        agent.agent,
        title=f"Refund {HOSTILE}",
        preview={
            "format": "markdown",
            "body": f"{HOSTILE}\n\n[click me](javascript:alert(4)) [data](data:text/html,x) "
            '[ok](https://example.com/x)\n\n<a href="javascript:alert(5)">raw</a>',
        },
        payload={"order_id": HOSTILE, "amount_cents": 100, "currency": "USD", HOSTILE: 1},
        context={HOSTILE: HOSTILE, "nested": {"deeper": [HOSTILE]}},
    )
    for url in ("/inbox/", f"/inbox/actions/{action.pk}", "/inbox/decided/"):
        body = html(rita_browser.get(url))
        assert "<script>alert" not in body
        assert "<img" not in body and "<svg" not in body
        assert not re.search(r"<[^>]+\son\w+\s*=", body), url
        assert not re.search(r"<a[^>]*href=\"(javascript|data):", body), url
    body = html(rita_browser.get(f"/inbox/actions/{action.pk}"))
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body
    assert '<a href="https://example.com/x" rel="noopener noreferrer">ok</a>' in body


def test_hidden_characters_are_made_visible(agent, rita_browser):
    action = make_action(
        agent.agent,
        title="Refund \u202e48$ \u200bon order 10432",
        context={"note": "tag\U000e0041smuggled"},
    )
    body = html(rita_browser.get(f"/inbox/actions/{action.pk}"))
    assert "\u202e" not in body and "\u200b" not in body and "\U000e0041" not in body
    assert 'title="RIGHT-TO-LEFT OVERRIDE">U+202E</span>' in body
    assert 'title="ZERO WIDTH SPACE">U+200B</span>' in body
    assert ">U+E0041</span>" in body
    assert "<title>Refund [U+202E]48$ [U+200B]on order 10432 · Impri</title>" in body


def test_pages_carry_a_strict_csp_and_no_inline_script(action, rita_browser):
    for url in ("/inbox/", f"/inbox/actions/{action.pk}", "/inbox/decided/", "/accounts/login/"):
        response = rita_browser.get(url)
        csp = response["Content-Security-Policy"]
        assert (
            "script-src 'self'" in csp and "unsafe-inline" not in csp and "unsafe-eval" not in csp
        )
        assert "frame-ancestors 'none'" in csp and "object-src 'none'" in csp
        body = html(response)
        assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", body), url
        assert " style=" not in body, url


def test_static_assets_are_served_without_a_cdn(rita_browser):
    for path in (
        "/static/inbox/inbox.js",
        "/static/inbox/inbox.css",
        "/static/inbox/htmx-2.0.11.min.js",
    ):
        response = rita_browser.get(path)
        assert response.status_code == 200, path
    page = html(rita_browser.get("/inbox/"))
    assert not re.search(r'(src|href)="(https?:)?//', page)


def test_htmx_asks_for_the_reviews_fragment(action, rita_browser):
    body = html(
        rita_browser.get(f"/inbox/actions/{action.pk}", headers={**HTMX, "HX-Target": "reviews"})
    )
    assert body.lstrip().startswith('<div id="reviews"')


# --- Deciding ----------------------------------------------------------------------------------


def test_approve_as_is(action, rita, rita_browser):
    response = rita_browser.post(
        f"/inbox/actions/{action.pk}/decide",
        {
            "approve-verdict": "approve",
            "approve-payload.amount_cents": "8400",
            "approve-note": "ok",
        },
    )
    assert response.status_code == 302
    assert response["Location"] == f"/inbox/actions/{action.pk}"
    action.refresh_from_db()
    assert action.status == ActionStatus.APPROVED
    assert action.decided_by_user == rita.user
    assert action.edited_by_human is False
    assert action.note == "ok"
    body = html(rita_browser.get(f"/inbox/actions/{action.pk}"))
    assert "<strong>you</strong>" in body
    assert '<form method="post" action="/inbox/actions/' not in body  # no decide form any more


def test_approve_with_a_lower_amount(action, rita_browser):
    response = rita_browser.post(
        f"/inbox/actions/{action.pk}/decide",
        {"approve-verdict": "approve", "approve-payload.amount_cents": "5000"},
    )
    assert response.status_code == 302
    action.refresh_from_db()
    assert action.payload["amount_cents"] == 5000
    assert action.edited_by_human is True


def test_an_out_of_bounds_edit_is_a_field_error(agent, rita_browser):
    use_rules(REVIEW_WITH_BOUNDS % 1)
    action = make_action(agent.agent)
    response = rita_browser.post(
        f"/inbox/actions/{action.pk}/decide",
        {"approve-verdict": "approve", "approve-payload.amount_cents": "9000"},
    )
    assert response.status_code == 422
    body = html(response)
    field = re.search(r'<div class="field edit-field has-error">(.*?)</div>', body, re.S).group(1)
    assert "must be at most 8400" in field
    assert 'value="9000"' in field  # the reviewer's input is kept
    assert 'aria-invalid="true"' in field
    action.refresh_from_db()
    assert action.status == ActionStatus.PENDING


def test_a_non_number_amount_is_a_field_error(action, rita_browser):
    response = rita_browser.post(
        f"/inbox/actions/{action.pk}/decide",
        {"approve-verdict": "approve", "approve-payload.amount_cents": "fifty"},
    )
    assert response.status_code == 422
    assert "Enter a whole number." in html(response)
    action.refresh_from_db()
    assert action.status == ActionStatus.PENDING


def test_reject_with_a_reason_code_and_a_note(action, rita_browser):
    response = rita_browser.post(
        f"/inbox/actions/{action.pk}/decide",
        {
            "reject-verdict": "reject",
            "reject-reason": "duplicate",
            "reject-note": "refunded on Monday",
        },
    )
    assert response.status_code == 302
    action.refresh_from_db()
    assert action.status == ActionStatus.REJECTED
    assert (action.note, action.reject_reason) == ("refunded on Monday", "duplicate")


def test_reject_without_a_reason_code(action, rita_browser):
    rita_browser.post(
        f"/inbox/actions/{action.pk}/decide", {"reject-verdict": "reject", "reject-note": "no"}
    )
    action.refresh_from_db()
    assert action.note == "no"


def test_an_unknown_reason_code_is_a_field_error(action, rita_browser):
    response = rita_browser.post(
        f"/inbox/actions/{action.pk}/decide",
        {"reject-verdict": "reject", "reject-reason": "because"},
    )
    assert response.status_code == 422
    assert "Select a valid choice" in html(response)


def test_a_second_decision_is_refused_and_says_who_won(action, sam, rita_browser):
    services.decide(action.pk, by=sam.user, verdict="approve")
    response = rita_browser.post(
        f"/inbox/actions/{action.pk}/decide",
        {"reject-verdict": "reject", "reject-note": "too late"},
    )
    assert response.status_code == 409
    body = html(response)
    assert "Too late" in body
    assert "Approved</strong> by <strong>sam</strong>" in body
    action.refresh_from_db()
    assert action.status == ActionStatus.APPROVED and action.note == ""


def test_an_expired_action_cannot_be_decided(agent, rita_browser):
    action = make_action(agent.agent, expires_in_s=60)
    with time_machine.travel(timezone.now() + timedelta(minutes=2)):
        response = rita_browser.post(
            f"/inbox/actions/{action.pk}/decide",
            {"approve-verdict": "approve", "approve-payload.amount_cents": "8400"},
        )
    assert response.status_code == 409
    assert "Expired</strong>" in html(response)


def test_an_outsider_cannot_decide(action, mallory):
    response = browser(mallory).post(
        f"/inbox/actions/{action.pk}/decide",
        {"approve-verdict": "approve", "approve-payload.amount_cents": "8400"},
    )
    assert response.status_code == 404
    action.refresh_from_db()
    assert action.status == ActionStatus.PENDING


def test_deciding_needs_login(action):
    response = Client().post(f"/inbox/actions/{action.pk}/decide", {"approve-verdict": "approve"})
    assert response.status_code == 302
    action.refresh_from_db()
    assert action.status == ActionStatus.PENDING


def test_deciding_needs_the_csrf_token(action, rita):
    client = Client(enforce_csrf_checks=True)
    client.force_login(rita.user)
    response = client.post(
        f"/inbox/actions/{action.pk}/decide",
        {"approve-verdict": "approve", "approve-payload.amount_cents": "8400"},
    )
    assert response.status_code == 403
    action.refresh_from_db()
    assert action.status == ActionStatus.PENDING


def test_every_form_on_the_action_page_carries_a_csrf_token(action, rita_browser):
    body = html(rita_browser.get(f"/inbox/actions/{action.pk}"))
    forms = re.findall(r'<form method="post".*?</form>', body, re.S)
    assert len(forms) == 5  # claim, approve, reject, request changes, log out
    assert all("csrfmiddlewaretoken" in form for form in forms)


def test_an_unknown_verdict_is_a_bad_request(action, rita_browser):
    response = rita_browser.post(f"/inbox/actions/{action.pk}/decide", {"approve-verdict": "maybe"})
    assert response.status_code == 400


def test_deciding_is_post_only(action, rita_browser):
    assert rita_browser.get(f"/inbox/actions/{action.pk}/decide").status_code == 405


def test_htmx_approval_answers_the_action_fragment(action, rita_browser):
    response = rita_browser.post(
        f"/inbox/actions/{action.pk}/decide",
        {"approve-verdict": "approve", "approve-payload.amount_cents": "6000"},
        headers={**HTMX, "HX-Target": "action"},
    )
    assert response.status_code == 200
    body = html(response)
    assert body.lstrip().startswith('<article id="action"')
    assert 'data-status="approved"' in body
    assert "= $60.00 USD" in body


def test_htmx_field_error_answers_422_with_the_fragment(agent, rita_browser):
    use_rules(REVIEW_WITH_BOUNDS % 1)
    action = make_action(agent.agent)
    response = rita_browser.post(
        f"/inbox/actions/{action.pk}/decide",
        {"approve-verdict": "approve", "approve-payload.amount_cents": "0"},
        headers={**HTMX, "HX-Target": "action"},
    )
    assert response.status_code == 422
    body = html(response)
    assert body.lstrip().startswith('<article id="action"')
    assert "must be at least 1" in body


def test_several_approvals_show_who_has_approved_so_far(agent, rita, sam, rita_browser):
    use_rules(REVIEW_WITH_BOUNDS % 2)
    action = make_action(agent.agent)
    first = browser(sam).post(
        f"/inbox/actions/{action.pk}/decide",
        {"approve-verdict": "approve", "approve-payload.amount_cents": "8400"},
    )
    assert first.status_code == 302
    action.refresh_from_db()
    assert action.status == ActionStatus.PENDING
    body = html(rita_browser.get(f"/inbox/actions/{action.pk}"))
    assert "Needs <strong>2</strong> approvals" in body
    assert "<strong>sam</strong> approved" in body
    rita_browser.post(
        f"/inbox/actions/{action.pk}/decide",
        {"approve-verdict": "approve", "approve-payload.amount_cents": "8400"},
    )
    action.refresh_from_db()
    assert action.status == ActionStatus.APPROVED


def test_neighbour_links_follow_the_queue_order(agent, rita_browser):
    older = make_action(agent.agent, title="Older")
    middle = make_action(agent.agent, title="Middle")
    newer = make_action(agent.agent, title="Newer")
    body = html(rita_browser.get(f"/inbox/actions/{middle.pk}"))
    assert f'href="/inbox/actions/{older.pk}" rel="next"' in body
    assert f'href="/inbox/actions/{newer.pk}" rel="prev"' in body
