"""Two-factor and step-up in real headless Chromium against `impri serve` (daphne, ASGI).

Enrolment from the QR page's secret, a recovery code at the next login, and the step-up
prompt on the approve form. The ten-minute window itself is pinned with time-machine in
tests/identity/test_two_factor.py (a served process can't be time-travelled).
"""

from __future__ import annotations

import base64
import re

import pytest
from django_otp.oath import totp
from playwright.sync_api import expect

from tests.browser import Reviewer, agent_key, chromium, push, server  # noqa: F401  (fixtures)
from tests.live import Deployment

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def deployment():
    dep = Deployment(IMPRI_STEP_UP_CENTS="5000")  # $50: the $84 refund needs a second factor
    yield dep
    dep.close()


def code_for(secret: str) -> str:
    key = base64.b32decode(secret + "=" * (-len(secret) % 8))
    return f"{totp(key, t0=0, step=30, digits=6, drift=0):06d}"


def test_enrol_then_a_recovery_code_at_login_then_approve_money_at_once(
    chromium, server, agent_key
):
    rita = Reviewer(chromium, server, "rita")
    page = rita.log_in()  # no authenticator yet: nothing changes
    page.get_by_role("link", name="rita").click()
    expect(page).to_have_url(server.url + "/accounts/2fa/")
    expect(page.locator("figure.qr svg")).to_be_visible()
    secret = page.locator("[data-secret]").inner_text()
    page.get_by_label("Code from the app").fill(code_for(secret))
    page.get_by_role("button", name="Turn on two-factor").click()
    codes = page.locator("[data-recovery-code]")
    expect(codes).to_have_count(10)
    recovery = codes.first.inner_text()
    page.get_by_role("link", name="I saved them, continue").click()
    expect(page).to_have_url(server.url + "/inbox/")
    assert rita.dialogs == []
    rita.close()

    again = Reviewer(chromium, server, "rita")
    page = again.page()
    page.goto(server.url + "/inbox/")
    page.get_by_label("Username").fill("rita")
    page.get_by_label("Password").fill("rita-password")
    page.get_by_role("button", name="Log in").click()
    expect(page).to_have_url(re.compile(r"/accounts/2fa/verify/\?next="))
    page.get_by_label("Code").fill(recovery)
    page.get_by_role("button", name="Verify").click()
    expect(page).to_have_url(server.url + "/inbox/")
    again.wait_live(page)

    action_id = push(server, agent_key, title="Refund $84.00, fresh factor")
    page = again.open_action(action_id)
    expect(page.locator("#stepup-code")).to_have_count(0)  # the code was just given
    page.get_by_role("button", name="Approve").click()
    expect(page.locator("#action")).to_have_attribute("data-status", "approved")
    assert page.evaluate("window.__violations") == []
    again.close()


def test_without_a_second_factor_money_is_refused_and_a_smaller_edit_goes_through(
    chromium, server, agent_key
):
    sam = Reviewer(chromium, server, "sam")
    sam.log_in()
    action_id = push(server, agent_key, title="Refund $84.00, no factor")
    page = sam.open_action(action_id)
    expect(page.locator("#step-up")).to_contain_text("set it up")
    page.get_by_role("button", name="Approve").click()
    expect(page.locator("#step-up-error")).to_contain_text("second factor")
    expect(page.locator("#action")).to_have_attribute("data-status", "pending")

    page.get_by_label("payload.amount_cents").fill("49.99")
    page.get_by_role("button", name="Approve").click()
    expect(page.locator("#action")).to_have_attribute("data-status", "approved")
    status = server.client(agent_key).get(f"/actions/{action_id}").json()
    assert status["status"] == "approved" and status["payload"]["amount_cents"] == 4999
    sam.close()
