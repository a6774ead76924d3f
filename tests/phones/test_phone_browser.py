"""The inbox on a phone, in real headless Chromium against `impri serve` (issue 32).

Every inbox page, the dashboard and the admin index at 375 px: no horizontal scroll, the
admin's operations headers not one letter per line, the decision within the first two
screens of the action page, and no word broken inside a path or an amount.
"""

from __future__ import annotations

import re

import httpx
import pytest
from playwright.sync_api import Page, expect

# One deployment and server for this module, as the inbox's browser tests make them.
from tests.browser import WATCH, chromium, deployment, push, server  # noqa: F401
from tests.live import last_word

pytestmark = pytest.mark.e2e

PHONE = {"width": 375, "height": 667}  # an iPhone SE's CSS viewport
# Paths, amounts and figures: each word stays on one line. (The payload's 64-digit SHA-256
# is the one token allowed to wrap: it is wider than a phone.)
WORDS = "code:not([data-payload-sha256]), .money, .row-amount, .approve-amount, dd"

# The text nodes of one element that a browser broke across lines (more than one line box).
BROKEN_WORDS = """
(selector) => {
  const broken = [];
  for (const el of document.querySelectorAll(selector)) {
    const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      for (const word of node.textContent.split(/\\s+/)) {
        if (!word) continue;
        const start = node.textContent.indexOf(word);
        const range = document.createRange();
        range.setStart(node, start);
        range.setEnd(node, start + word.length);
        const tops = new Set([...range.getClientRects()].map(r => Math.round(r.top)));
        if (tops.size > 1) broken.push(word);
      }
    }
  }
  return broken;
}
"""
# How many lines an element's text takes.
LINES = """
(el) => {
  const range = document.createRange();
  range.selectNodeContents(el);
  return new Set([...range.getClientRects()].map(r => Math.round(r.top))).size;
}
"""


@pytest.fixture(scope="module")
def keys(deployment, server) -> dict:
    staff = (
        "from django.contrib.auth.models import User; "
        "User.objects.filter(username='olga').update(is_staff=True, is_superuser=True)"
    )
    agent, _, _, olga = deployment.commands(
        ("createagent", "support-bot"),
        ("createreviewer", "olga", "--password", "olga-password"),
        ("shell", "--no-imports", "-c", staff),
        ("token", "olga"),
    )
    return {"agent": last_word(agent), "olga": last_word(olga)}


@pytest.fixture
def phone(chromium, server, keys):
    context = chromium.new_context(
        viewport=PHONE, is_mobile=True, has_touch=True, device_scale_factor=2
    )
    context.add_init_script(WATCH)
    page = context.new_page()
    page.goto(server.url + "/inbox/")
    page.get_by_label("Username").fill("olga")
    page.get_by_label("Password").fill("olga-password")
    page.get_by_role("button", name="Log in").click()
    expect(page).to_have_url(server.url + "/inbox/")
    yield page
    context.close()


def fits(page: Page, path: str) -> None:
    width = page.evaluate("document.documentElement.scrollWidth")
    wide = page.evaluate(
        "() => [...document.querySelectorAll('body *')]"
        ".filter(e => e.getBoundingClientRect().right > innerWidth + 0.5)"
        ".slice(0, 5).map(e => e.tagName + '.' + e.className)"
    )
    assert width == PHONE["width"], f"{path}: {width} px wide, past the edge: {wide}"


def test_every_page_fits_a_phone(phone, server, keys):
    # payload.shipping_adjustment.warehouse_reference: wider than a phone, two breaks at dots.
    long_path = {"shipping_adjustment": {"warehouse_reference": "ADJ-2026-000000123456789"}}
    pending = push(server, keys["agent"], title="Refund $84.00 on order 10432")
    nested = push(
        server,
        keys["agent"],
        title="Refund $12.00 with a long reference",
        payload={"order_id": "20001", "amount_cents": 1200, "currency": "USD", **long_path},
    )
    decided = push(server, keys["agent"], title="Refund $84.00, approved already")
    reviewer = server.client(keys["olga"])
    assert reviewer.post(f"/actions/{decided}/approve", json={}).status_code == 200

    pages = [
        "/inbox/",
        "/inbox/?q=refund&status=pending",
        "/inbox/decided/",
        "/inbox/dashboard/",
        f"/inbox/actions/{pending}",
        f"/inbox/actions/{nested}",
        f"/inbox/actions/{decided}",
        "/inbox/push/",
        "/accounts/2fa/",
        "/admin/",
    ]
    for path in pages:
        response = phone.goto(server.url + path)
        assert response.status == 200, path
        fits(phone, path)
        assert phone.evaluate("window.__violations") == [], path
        # Paths and amounts are never split inside a word.
        broken = phone.evaluate(BROKEN_WORDS, WORDS)
        assert broken == [], f"{path}: words broken across lines: {broken}"
        # ... and a path wraps after a dot rather than sticking out of its cell.
        sticking = phone.evaluate(
            "() => [...document.querySelectorAll('.payload th code')].filter(c =>"
            " c.getBoundingClientRect().right > c.closest('th').getBoundingClientRect().right + 0.5)"
            ".map(c => c.textContent)"
        )
        assert sticking == [], f"{path}: paths wider than their cell: {sticking}"

    # The decision is within the first two screens of the action page.
    phone.goto(f"{server.url}/inbox/actions/{pending}")
    approve = phone.get_by_role("button", name=re.compile("^Approve"))
    expect(approve).to_be_visible()
    bottom = approve.evaluate("b => b.getBoundingClientRect().bottom + scrollY")
    assert bottom <= 2 * PHONE["height"], f"Approve ends {bottom} px down"
    expect(phone.locator("label[for='id_approve-payload.amount_cents'] code")).to_have_text(
        "payload.amount_cents"
    )

    # The admin's operations headers read as words, not one letter per line.
    phone.goto(server.url + "/admin/")
    for heading in ("Health", "Queue", "Outbox backlog", "Audit chain"):
        h2 = phone.get_by_role("heading", name=heading, exact=True)
        lines = h2.evaluate(LINES)
        assert lines == 1, f"{heading!r} takes {lines} lines"
    headers = phone.locator("[aria-labelledby='ops-outbox'] thead th")
    assert headers.count() == 5
    for i in range(headers.count()):
        th = headers.nth(i)
        letters = len(th.inner_text().replace(" ", "").replace(",", ""))
        tall = th.evaluate(LINES)
        assert tall <= 2, f"{th.inner_text()!r} ({letters} letters) spans {tall} lines"


def test_the_manifest_worker_and_offline_page_are_served_for_installing(server):
    with httpx.Client(base_url=server.url) as client:
        manifest = client.get("/inbox/manifest.webmanifest")
        assert manifest.status_code == 200
        assert manifest.headers["content-type"] == "application/manifest+json"
        data = manifest.json()
        assert data["scope"] == data["start_url"] == "/inbox/"
        assert data["display"] == "standalone"
        sizes = {icon["sizes"] for icon in data["icons"] if icon["type"] == "image/png"}
        assert {"192x192", "512x512"} <= sizes
        for icon in data["icons"]:
            png = client.get(icon["src"])
            assert png.status_code == 200 and png.content.startswith(b"\x89PNG"), icon

        worker = client.get("/inbox/sw.js")
        assert worker.status_code == 200
        assert worker.headers["content-type"].startswith("text/javascript")
        assert worker.headers["service-worker-allowed"] == "/inbox/"
        assert "no-cache" in worker.headers["cache-control"]

        offline = client.get("/inbox/offline")
        assert offline.status_code == 200 and "You are offline" in offline.text


def test_the_inbox_installs_its_worker_and_opens_offline(phone, server):
    phone.goto(server.url + "/inbox/")
    scope, state = phone.evaluate(
        "navigator.serviceWorker.ready.then(r => [r.scope, r.active && r.active.state])"
    )
    assert scope == server.url + "/inbox/"
    assert state in ("activating", "activated")

    cdp = phone.context.new_cdp_session(phone)
    manifest = cdp.send("Page.getAppManifest")
    assert manifest["url"] == server.url + "/inbox/manifest.webmanifest"
    assert manifest["errors"] == []
    assert manifest["parsed"]["scope"] == server.url + "/inbox/"
    # Chrome's own installability check; a Playwright context is incognito, which only
    # a browser profile of the reviewer's own would not be.
    errors = cdp.send("Page.getInstallabilityErrors")["installabilityErrors"]
    assert [e["errorId"] for e in errors if e["errorId"] != "in-incognito"] == [], errors

    # One button turns notifications on (pressing it would reach the browser's push service,
    # which a test never does: tests/phones/test_webpush.py plays that part).
    expect(phone.get_by_role("button", name="Turn on notifications")).to_be_visible()
    expect(phone.get_by_role("link", name="Your devices")).to_have_attribute("href", "/inbox/push/")

    phone.reload()  # now controlled by the worker
    phone.wait_for_function("navigator.serviceWorker.controller !== null")
    phone.context.set_offline(True)
    try:
        phone.goto(server.url + "/inbox/decided/")
        expect(phone.get_by_role("heading", name="You are offline")).to_be_visible()
    finally:
        phone.context.set_offline(False)


def test_an_amount_is_typed_in_dollars_and_what_will_happen_follows(phone, server, keys):
    action_id = push(server, keys["agent"], title="Refund $84.00, edited on a phone")
    phone.goto(f"{server.url}/inbox/actions/{action_id}")
    amount = phone.get_by_label("payload.amount_cents")
    expect(amount).to_have_value("84.00")
    expect(phone.locator("output.minor-preview")).to_have_text("payload.amount_cents = 8400")

    amount.fill("50.5")  # as a person types it
    expect(phone.locator("output.minor-preview")).to_have_text("payload.amount_cents = 5050")
    expect(phone.locator(".will-happen .outcome > .money")).to_have_text("$50.50 USD")
    expect(phone.locator("#decision button.approve")).to_have_text("Approve $50.50 USD")

    amount.fill("50.555")  # not a whole number of cents: nothing is restated as approvable
    expect(phone.locator("output.minor-preview")).to_have_text("")
    expect(phone.locator(".will-happen .outcome > .money")).to_contain_text("enter an amount")

    amount.fill("$1,000.999")  # sent anyway (no script check stops it): the server refuses it
    phone.get_by_role("button", name=re.compile("^Approve")).click()
    expect(phone.locator(".edit-field .error")).to_contain_text("2 decimal places")
    expect(phone.locator("#action")).to_have_attribute("data-status", "pending")

    phone.get_by_label("payload.amount_cents").fill("12.34")
    phone.get_by_role("button", name=re.compile("^Approve")).click()
    expect(phone.locator("#action")).to_have_attribute("data-status", "approved")
    answer = server.client(keys["agent"]).get(f"/actions/{action_id}").json()
    assert answer["payload"]["amount_cents"] == 1234
