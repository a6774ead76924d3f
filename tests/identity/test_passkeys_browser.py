"""Passkeys in real headless Chromium with a virtual authenticator (the DevTools protocol's
WebAuthn domain) against `impri serve` (issue 32).

A reviewer without a second factor is refused money above IMPRI_STEP_UP_CENTS; she adds a
passkey; an assertion that does not verify approves nothing; then pressing Approve asks for
the passkey on the same screen and the refund is approved. WebAuthn needs a domain for its
relying party, so the browser talks to the server as http://localhost (a secure context).
"""

from __future__ import annotations

import json
import re

import pytest
from playwright.sync_api import expect

from tests.browser import WATCH, chromium, push  # noqa: F401  (fixtures)

# The two-factor tests' deployment: IMPRI_STEP_UP_CENTS=5000, so the $84 refund needs a factor.
from tests.identity.test_two_factor_browser import deployment, server  # noqa: F401  (fixtures)
from tests.live import last_word

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def agent_key(deployment, server) -> str:
    key, _ = deployment.commands(
        ("createagent", "support-bot"), ("createreviewer", "pat", "--password", "pat-password")
    )
    return last_word(key)


def with_authenticator(page) -> str:
    cdp = page.context.new_cdp_session(page)
    cdp.send("WebAuthn.enable")
    options = {
        "protocol": "ctap2",
        "transport": "internal",
        "hasResidentKey": True,
        "hasUserVerification": True,
        "isUserVerified": True,
        "automaticPresenceSimulation": True,
    }
    return cdp, cdp.send("WebAuthn.addVirtualAuthenticator", {"options": options})[
        "authenticatorId"
    ]


def corrupt_signature(route):
    body = json.loads(route.request.post_data)
    signature = body["credential"]["response"]["signature"]
    body["credential"]["response"]["signature"] = signature[:-4] + (
        "AAAA" if not signature.endswith("AAAA") else "BBBB"
    )
    route.continue_(post_data=json.dumps(body))


def test_money_needs_the_passkey_asked_for_beside_approve(chromium, deployment, server, agent_key):
    origin = server.url.replace("127.0.0.1", "localhost")
    context = chromium.new_context(
        viewport={"width": 375, "height": 667}, is_mobile=True, has_touch=True
    )
    context.add_init_script(WATCH)
    page = context.new_page()
    try:
        cdp, authenticator = with_authenticator(page)
        page.goto(origin + "/inbox/")
        page.get_by_label("Username").fill("pat")
        page.get_by_label("Password").fill("pat-password")
        page.get_by_role("button", name="Log in").click()
        expect(page).to_have_url(origin + "/inbox/")

        # No second factor yet: the $84 refund is refused.
        action_id = push(server, agent_key, title="Refund $84.00, passkey")
        page.goto(f"{origin}/inbox/actions/{action_id}")
        expect(page.locator("#step-up")).to_contain_text("set it up")
        page.get_by_role("button", name=re.compile("^Approve")).click()
        expect(page.locator("#step-up-error")).to_contain_text("second factor")
        expect(page.locator("#action")).to_have_attribute("data-status", "pending")

        # A passkey, added on the two-factor page.
        page.goto(origin + "/accounts/2fa/")
        page.get_by_label("Name of this passkey").fill("Pat's phone")
        page.get_by_role("button", name="Add a passkey").click()
        expect(page.locator("#passkey-list")).to_contain_text("Pat's phone")
        assert (
            len(
                cdp.send("WebAuthn.getCredentials", {"authenticatorId": authenticator})[
                    "credentials"
                ]
            )
            == 1
        )

        # Approve asks for the passkey on the same screen; a signature that does not verify approves nothing.
        page.goto(f"{origin}/inbox/actions/{action_id}")
        expect(page.locator("#stepup-passkey")).to_be_visible()
        approve = page.get_by_role("button", name=re.compile("^Approve"))
        page.route("**/accounts/2fa/passkeys/auth", corrupt_signature)
        approve.click()
        expect(page.locator("[data-passkey-status]")).to_contain_text("did not verify")
        expect(page.locator("#action")).to_have_attribute("data-status", "pending")
        page.unroute("**/accounts/2fa/passkeys/auth")

        approve.click()
        expect(page.locator("#action")).to_have_attribute("data-status", "approved")
        status = server.client(agent_key).get(f"/actions/{action_id}").json()
        assert status["status"] == "approved" and status["decided_by"]["name"] == "pat"
        assert page.evaluate("window.__violations") == []
    finally:
        context.close()

    events = (
        deployment.impri(
            "shell",
            "-c",
            "from audit.models import AuditEvent; "
            "print(sorted(AuditEvent.objects.filter(event__in=["
            "'twofactor.passkey_registered', 'twofactor.passkey_used', 'stepup.verified', 'stepup.refused'"
            "]).values_list('event', flat=True)))",
        )
        .stdout.strip()
        .splitlines()[-1]
    )
    assert events == str(
        [
            "stepup.refused",
            "stepup.verified",
            "twofactor.passkey_registered",
            "twofactor.passkey_used",
        ]
    )


def test_the_passkey_is_the_second_factor_at_the_next_login(
    chromium,
    deployment,
    server,
    agent_key,
):
    origin = server.url.replace("127.0.0.1", "localhost")
    first = chromium.new_context()
    page = first.new_page()
    cdp, authenticator = with_authenticator(page)
    page.goto(origin + "/accounts/login/")
    page.get_by_label("Username").fill("pat")
    page.get_by_label("Password").fill("pat-password")
    page.get_by_role("button", name="Log in").click()
    # Pat has a passkey (the test above): the password alone reaches only the verify page.
    expect(page).to_have_url(re.compile(r"/accounts/2fa/verify/"))
    expect(page.get_by_role("button", name="Use your passkey")).to_be_visible()
    first.close()
