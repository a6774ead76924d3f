"""A reviewer's rough edges at 375 px, in headless Chromium against `impri serve` (issue 43).

Measured, not eyeballed: the action page's cards each take the column's full width, the queue's
filters leave the first screen to the queue, the charts by day open on today, the refunded
amounts sit inside their card, and "Turn on notifications" says why when it can't.
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

# One deployment and server for this module, as the inbox's browser tests make them.
from tests.browser import WATCH, chromium, deployment, push, server  # noqa: F401
from tests.phones.test_phone_browser import PHONE, keys, phone  # noqa: F401

pytestmark = pytest.mark.e2e

WIDTH = "el => el.getBoundingClientRect().width"


def test_every_card_of_the_action_page_takes_the_full_width(phone, server, keys):
    action_id = push(server, keys["agent"], title="Refund $84.00 on order 10432")
    phone.goto(f"{server.url}/inbox/actions/{action_id}")
    column = phone.locator("#action .will-happen").evaluate(WIDTH)
    assert column > PHONE["width"] - 40, column  # the page's padding, nothing more
    for card in ("will-happen", "agent-says", "decision", "context", "why", "history"):
        width = phone.locator(f"#action .card.{card}").evaluate(WIDTH)
        assert width == column, f".{card} is {width} px wide of {column}"


def test_the_queues_filters_leave_the_first_screen_to_the_queue(phone, server, keys):
    action_id = push(server, keys["agent"], title="Refund $12.00 on order 20001")
    phone.goto(server.url + "/inbox/")
    filters = phone.locator("form.filters").bounding_box()
    assert filters["height"] <= 0.25 * PHONE["height"], filters
    expect(phone.get_by_label("Search")).to_be_visible()
    expect(phone.get_by_label("Kind")).to_be_hidden()
    top = phone.locator(f"#row-{action_id}").bounding_box()["y"]
    assert top < PHONE["height"] * 0.75, f"the first action starts {top} px down"

    phone.get_by_text("More filters").click()
    expect(phone.get_by_label("Kind")).to_be_visible()
    # A filter in force is shown, folded or not.
    phone.goto(server.url + "/inbox/?kind=payment.refund")
    expect(phone.get_by_label("Kind")).to_be_visible()


def test_a_wide_screen_shows_every_filter_at_once(chromium, server, keys):
    context = chromium.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    try:
        log_in(page, server)
        expect(page.get_by_label("Kind")).to_be_visible()
        expect(page.get_by_label("Order")).to_be_visible()
    finally:
        context.close()


def test_the_dashboard_opens_on_today_and_shows_every_refunded_amount(phone, server, keys):
    big = push(
        server,
        keys["agent"],
        title="Refund a lot",
        payload={"order_id": "1", "amount_cents": 123_456_789_00, "currency": "USD"},
    )
    reviewer, agent = server.client(keys["olga"]), server.client(keys["agent"])
    assert reviewer.post(f"/actions/{big}/approve", json={}).status_code == 200
    report = {"status": "executed", "detail": "refunded"}
    assert agent.post(f"/actions/{big}/result", json=report).status_code == 200

    phone.goto(server.url + "/inbox/dashboard/")
    for title in ("volume-title", "decision-title"):
        card = phone.locator(f"section[aria-labelledby='{title}']")
        scrolled = card.evaluate("c => [c.scrollLeft, c.scrollWidth - c.clientWidth]")
        assert scrolled[1] > 0, f"{title}: the chart fits without scrolling: nothing to test"
        assert abs(scrolled[0] - scrolled[1]) <= 1, f"{title}: scrolled to {scrolled}"
        # Today's label, the chart's last, is on the screen.
        today = card.locator("svg text.tick").last.bounding_box()
        box = card.bounding_box()
        assert box["x"] <= today["x"] and today["x"] + today["width"] <= box["x"] + box["width"]

    for dimension in ("rule", "agent", "reviewer"):
        card = phone.locator(f"section[aria-labelledby='refunds-{dimension}']")
        amount = card.locator(".money").filter(has_text="$123,456,789.00 USD")
        expect(amount).to_be_visible()
        inside = amount.evaluate(
            "a => { const r = a.getBoundingClientRect(), c = a.closest('section').getBoundingClientRect();"
            " return r.left >= c.left && r.right <= c.right && a.scrollWidth <= a.clientWidth + 1; }"
        )
        assert inside, f"refunded by {dimension}: the amount is cut off"
        assert card.evaluate("c => c.scrollWidth <= c.clientWidth"), dimension


# --- Turn on notifications, when the push service can't be reached ---------------------------

# The browser's own PushManager, answering as it does when its push service is out of reach.
HANGS = (
    "PushManager.prototype.subscribe = function () {"
    " document.body.dataset.subscribing = '1'; return new Promise(function () {}); };"
)
FAILS = (
    "PushManager.prototype.subscribe = function () { return Promise.reject("
    "new DOMException('Registration failed - push service error', 'AbortError')); };"
)
UNREACHABLE = re.compile(
    r"^Notifications are off: this browser's push service could not be reached"
)


def push_page(chromium, server, script: str | None = None, clock: bool = False):
    context = chromium.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
    context.grant_permissions(["notifications"], origin=server.url)
    context.add_init_script(WATCH)
    if script:
        context.add_init_script(script)
    page = context.new_page()
    if clock:
        page.clock.install()
    log_in(page, server)
    page.evaluate("navigator.serviceWorker.ready.then(() => true)")
    return context, page


def log_in(page, server) -> None:
    page.goto(server.url + "/inbox/")
    page.get_by_label("Username").fill("olga")
    page.get_by_label("Password").fill("olga-password")
    page.get_by_role("button", name="Log in").click()
    expect(page).to_have_url(server.url + "/inbox/")


def test_a_push_service_that_never_answers_is_named_after_a_wait(chromium, server, keys):
    context, page = push_page(chromium, server, HANGS, clock=True)
    try:
        status = page.locator("[data-push-status]")
        page.get_by_role("button", name="Turn on notifications").click()
        expect(status).to_have_text("Turning on notifications…")
        # The browser was asked (after Impri's key arrived): now let 21 s pass on the page's clock.
        expect(page.locator("body")).to_have_attribute("data-subscribing", "1")
        page.clock.run_for("00:21")
        expect(status).to_have_text(UNREACHABLE)
        expect(status).to_contain_text("Check this device's connection")
        expect(page.get_by_role("button", name="Turn on notifications")).to_be_enabled()
        assert page.evaluate("window.__violations") == []
    finally:
        context.close()


def test_a_push_service_error_is_named(chromium, server, keys):
    context, page = push_page(chromium, server, FAILS)
    try:
        page.get_by_role("button", name="Turn on notifications").click()
        expect(page.locator("[data-push-status]")).to_have_text(UNREACHABLE)
    finally:
        context.close()


def test_a_browser_that_may_not_subscribe_says_where_to_allow_it(chromium, server, keys):
    # Headless Chromium refuses every subscription ("Registration failed - permission denied").
    context, page = push_page(chromium, server)
    try:
        page.get_by_role("button", name="Turn on notifications").click()
        expect(page.locator("[data-push-status]")).to_have_text(
            "Notifications are off: notifications are not allowed for this site: allow them in "
            "the browser's site settings, then try again."
        )
    finally:
        context.close()
