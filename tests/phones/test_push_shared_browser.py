"""A shared browser in real Chromium: the page registers its push subscription for whoever
is signed in, and a second reviewer's registration takes nothing from the first (issue 40).

Chromium here cannot reach a push service, so the browser's existing subscription is
played by an init script (``PushManager.getSubscription`` answers one, as a browser that
someone turned notifications on in would); everything else is the inbox's own script
against `impri serve`. tests/phones/test_webpush.py covers what the server then pushes.
"""

from __future__ import annotations

import base64
import json
import os
import re

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from playwright.sync_api import Page, expect

from tests.browser import CHROMIUM, CHROMIUM_ARGS, chromium  # noqa: F401
from tests.live import Deployment

pytestmark = pytest.mark.e2e

ENDPOINT = "http://127.0.0.1:9/push/front-desk"


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _subscription() -> dict:
    point = (
        ec.generate_private_key(ec.SECP256R1())
        .public_key()
        .public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
    )
    return {
        "endpoint": ENDPOINT,
        "expirationTime": None,
        "keys": {"p256dh": _b64url(point), "auth": _b64url(os.urandom(16))},
    }


# The browser already holds a subscription for the inbox (someone turned notifications on).
HAS_SUBSCRIPTION = """
(() => {
  const json = %s;
  const subscription = { endpoint: json.endpoint, toJSON: () => json,
                         unsubscribe: () => Promise.resolve(true) };
  if (window.PushManager) {
    PushManager.prototype.getSubscription = function () { return Promise.resolve(subscription); };
  }
})();
"""


@pytest.fixture(scope="module")
def server():
    deployment = Deployment(IMPRI_CALLBACK_ALLOWED_NETWORKS="127.0.0.0/8")
    server = deployment.start_server()
    for name in ("rita", "nora"):
        deployment.impri("createreviewer", name, "--password", f"{name}-password")
    yield server
    deployment.close()


def _log_in(page: Page, server, username: str) -> None:
    page.goto(server.url + "/inbox/")
    expect(page).to_have_url(re.compile(r"/accounts/login/\?next="))
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(f"{username}-password")
    page.get_by_role("button", name="Log in").click()
    expect(page).to_have_url(server.url + "/inbox/")


def _devices(page: Page) -> list[dict]:
    return page.evaluate(
        "fetch('/inbox/push/subscriptions', {credentials: 'same-origin'})"
        ".then(r => r.json()).then(b => b.devices)"
    )


def _wait_for_devices(page: Page, count: int) -> list[dict]:
    page.wait_for_function(
        "n => fetch('/inbox/push/subscriptions').then(r => r.json())"
        ".then(b => b.devices.length === n)",
        arg=count,
        timeout=15000,
    )
    return _devices(page)


def test_the_next_reviewer_on_a_shared_browser_is_registered_and_the_first_keeps_theirs(
    chromium,
    server,
):
    shared = chromium.new_context(viewport={"width": 1280, "height": 900})
    shared.add_init_script(HAS_SUBSCRIPTION % json.dumps(_subscription()))
    page = shared.new_page()
    _log_in(page, server, "rita")
    # The page found the browser's subscription: it shows notifications on and registers it.
    expect(page.get_by_role("button", name="Turn off notifications on this device")).to_be_visible()
    rita_devices = _wait_for_devices(page, 1)
    assert rita_devices[0]["endpoint_host"] == "127.0.0.1"

    # Rita signs out; Nora signs in on the same browser, which still holds the subscription.
    page.get_by_role("button", name="Log out").click()
    _log_in(page, server, "nora")
    nora_devices = _wait_for_devices(page, 1)
    assert nora_devices[0]["id"] != rita_devices[0]["id"]
    page.reload()  # a second load changes nothing
    assert [d["id"] for d in _wait_for_devices(page, 1)] == [nora_devices[0]["id"]]
    shared.close()

    # Rita's registration is as it was: same device, not moved to Nora.
    own = chromium.new_context()
    mine = own.new_page()
    _log_in(mine, server, "rita")
    assert _devices(mine) == rita_devices
    own.close()
