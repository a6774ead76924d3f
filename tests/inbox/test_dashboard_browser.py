"""The dashboard in real headless Chromium against `impri serve`: charts drawn, nothing blocked."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from playwright.sync_api import expect

from tests.browser import WATCH, chromium, deployment, push, server  # noqa: F401  (fixtures)
from tests.live import last_word

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def keys(deployment, server) -> dict:
    grant = (
        "from django.contrib.auth.models import Group, Permission, User; "
        "g = Group.objects.create(name='finance'); "
        "g.permissions.add(Permission.objects.get(codename='view_dashboard')); "
        "User.objects.get(username='fiona').groups.add(g)"
    )
    agent, _, _, _, rita = deployment.commands(
        ("createagent", "support-bot"),
        ("createreviewer", "rita", "--password", "rita-password"),
        ("createreviewer", "fiona", "--password", "fiona-password"),
        ("shell", "--no-imports", "-c", grant),
        ("token", "rita"),
    )
    return {"agent": last_word(agent), "rita": last_word(rita)}


def test_a_finance_lead_sees_the_charts_drawn_under_the_csp(chromium, server, keys):
    approved = push(server, keys["agent"])
    rejected = push(server, keys["agent"], title="Refund too much")
    reviewer = server.client(keys["rita"])
    assert reviewer.post(f"/actions/{approved}/approve", json={}).status_code == 200
    assert reviewer.post(f"/actions/{rejected}/reject", json={"note": "no"}).status_code == 200
    agent = server.client(keys["agent"])
    report = {"status": "executed", "detail": "refunded"}
    assert agent.post(f"/actions/{approved}/result", json=report).status_code == 200

    context = chromium.new_context(viewport={"width": 1280, "height": 900}, accept_downloads=True)
    context.add_init_script(WATCH)
    page = context.new_page()
    try:
        page.goto(server.url + "/inbox/dashboard/")
        page.get_by_label("Username").fill("fiona")
        page.get_by_label("Password").fill("fiona-password")
        page.get_by_role("button", name="Log in").click()
        expect(page).to_have_url(re.compile(r"/inbox/dashboard/$"))
        expect(page.locator('[data-figure="pushed"]')).to_have_text("2")
        expect(page.locator('[data-figure="refunded"]')).to_have_text("$84.00 USD")
        # Bars are drawn and coloured by inbox.css (an unstyled SVG rect is black).
        bar = page.locator("rect.bar-approved").first
        expect(bar).to_be_visible()
        fill = bar.evaluate("el => getComputedStyle(el).fill")
        assert fill not in ("rgb(0, 0, 0)", "none", ""), fill
        expect(page.locator("#refunds-reviewer + .refund-bars .name")).to_have_text("rita")
        assert page.evaluate("window.__violations") == []

        with page.expect_download() as download:
            page.get_by_role("link", name="Download daily CSV").click()
        text = Path(download.value.path()).read_text(encoding="utf-8")
        assert text.splitlines()[0].startswith("date,pushed,approved,rejected")
        assert text.splitlines()[-1].split(",")[1:4] == ["2", "1", "1"]
    finally:
        context.close()
