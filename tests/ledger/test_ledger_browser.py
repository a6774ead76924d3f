"""The Reconciliation page and an action's movements, in real headless Chromium against
`impri serve`, fed by Stripe events signed as Stripe signs them."""

from __future__ import annotations

import json
import re
import uuid

import httpx
import pytest
from playwright.sync_api import expect, sync_playwright

from tests.browser import CHROMIUM, CHROMIUM_ARGS
from tests.factories import SEED_RULES, refund_body
from tests.live import Deployment

from .helpers import SECRET, event, refund_obj, sign

pytestmark = pytest.mark.e2e

GRANT_AND_APPROVE = """
from django.contrib.auth.models import Permission, User
from approvals import services
rita = User.objects.get(username="rita")
rita.user_permissions.add(Permission.objects.get(codename="reconcile"))
services.decide("{action}", by=rita, verdict="approve")
"""


@pytest.fixture(scope="module")
def deployment():
    dep = Deployment(IMPRI_STRIPE_WEBHOOK_SECRET=SECRET)
    yield dep
    dep.close()


def stripe(server, body: dict):
    payload = json.dumps(body)
    with httpx.Client(timeout=30) as client:
        return client.post(
            server.url + "/integrations/stripe/events",
            content=payload,
            headers={"Stripe-Signature": sign(payload), "Content-Type": "application/json"},
        )


def test_reconciliation_page_and_the_action_page(deployment, tmp_path):
    server = deployment.start_server()
    key = deployment.last_word("createagent", "support-bot")
    deployment.impri(
        "createreviewer", "rita", "--password", "rita-password", "--group", "support-leads"
    )
    rules = tmp_path / "rules.yaml"
    rules.write_text(SEED_RULES)
    deployment.impri("rules", "import", str(rules))
    agent = server.client(key)
    body = refund_body(idempotency_key=uuid.uuid4().hex)
    action_id = agent.post("/actions", json=body).json()["action_id"]
    deployment.impri("shell", "-c", GRANT_AND_APPROVE.format(action=action_id))
    report = agent.post(
        f"/actions/{action_id}/result", json={"status": "executed", "reference": "re_web"}
    )
    assert report.status_code == 200, report.text
    assert report.json()["result"]["reference"] == "re_web"
    assert stripe(server, event("refund.created", refund_obj("re_web", 8400))).status_code == 200
    assert stripe(server, event("refund.created", refund_obj("re_stray", 500))).status_code == 200
    read = agent.get(f"/actions/{action_id}").json()["reconciliation"]
    assert read["state"] == "matched" and read["movements"][0]["id"] == "re_web"

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_context().new_page()
        page.goto(server.url + "/inbox/")
        page.get_by_label("Username").fill("rita")
        page.get_by_label("Password").fill("rita-password")
        page.get_by_role("button", name="Log in").click()
        expect(page).to_have_url(server.url + "/inbox/")

        page.get_by_role("link", name="Reconciliation").click()
        expect(page.get_by_role("heading", name="Reconciliation", level=1)).to_be_visible()
        stray = page.locator('tr[data-exception="unapproved"]')
        expect(stray).to_contain_text("re_stray")
        expect(stray).to_contain_text("$5.00 USD")
        expect(page.locator('[data-figure="unapproved"]')).to_have_text("1")
        page.select_option("#f-state", "mismatch")
        page.get_by_role("button", name="Filter").click()
        expect(page).to_have_url(re.compile(r"state=mismatch"))
        expect(page.locator('tr[data-exception="unapproved"]')).to_have_count(0)
        page.goto(server.url + "/inbox/reconciliation/")
        row = page.locator('tr[data-exception="unapproved"]')
        row.get_by_placeholder("why this is fine").fill("refunded by hand in Stripe")
        row.get_by_role("button", name="Mark explained").click()
        expect(page.get_by_text("No open exception")).to_be_visible()

        page.goto(f"{server.url}/inbox/actions/{action_id}")
        panel = page.locator("#reconciliation")
        expect(panel.locator("[data-reconciliation-state]")).to_have_text("matched")
        expect(panel.locator('tr[data-movement="re_web"]')).to_contain_text("$84.00 USD")
        browser.close()
