"""Take the inbox screenshots in docs/screenshots with headless Chromium.

    python docs/screenshots/take.py

Starts a throwaway `impri serve` (tests/live.py), pushes a few realistic
actions over the REST API, logs in as a reviewer and saves PNGs beside this file.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import django

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))
# tests.factories imports the models; the servers themselves get their own data dir.
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "impri.settings")
os.environ.setdefault("IMPRI_DATA_DIR", tempfile.mkdtemp(prefix="impri-shots-"))
django.setup()

from playwright.sync_api import expect, sync_playwright  # noqa: E402

from tests.browser import CHROMIUM, CHROMIUM_ARGS  # noqa: E402
from tests.factories import refund_body  # noqa: E402
from tests.live import Deployment  # noqa: E402

ACTIONS = [
    refund_body(
        title="Refund $840.00 on order 10432",
        preview={
            "format": "markdown",
            "body": "Customer reports a **damaged mug**. Refund $840.00 to the card on file.\n\n"
            "- Photo: [customer upload](https://shop.example.com/uploads/10432.jpg)\n"
            "- Delivered 3 days ago",
        },
        context={
            "customer_message": "The mug arrived broken, the handle came off in the box.",
            "order_summary": {"items": [{"sku": "MUG-1", "qty": 1}], "total_cents": 8400},
        },
    ),
    refund_body(
        title="Refund €19.90 on order 88120",
        payload={"order_id": "88120", "amount_cents": 1990, "currency": "EUR", "reason": "late"},
        preview={
            "format": "plain",
            "body": "Parcel arrived 9 days late; goodwill refund of €19.90.",
        },
    ),
    refund_body(
        kind="email.send",
        title="Send apology email to dana@example.com",
        payload={"to": "dana@example.com", "template": "apology-late-delivery"},
        editable=[],
        preview={"format": "plain", "body": "Hi Dana, we are sorry your parcel was late…"},
        flags=["customer_facing"],
    ),
    refund_body(
        title="Refund $1,250.00 on order 10977",
        payload={"order_id": "10977", "amount_cents": 125000, "currency": "USD", "reason": "fraud"},
        flags=["policy_exception"],
        expires_in_s=1800,
        preview={"format": "plain", "body": "Card holder disputes the charge. Refund $1,250.00."},
    ),
]


def main() -> None:
    dep = Deployment()
    try:
        server = dep.start_server()
        key = dep.last_word("createagent", "support-bot")
        dep.impri("createreviewer", "rita", "--password", "rita-password")
        with server.client(key) as client:
            ids = [client.post("/actions", json=body).json()["action_id"] for body in ACTIONS]
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            sizes = (
                ("", {"width": 1280, "height": 860}),
                ("-phone", {"width": 390, "height": 844}),
            )
            for name, viewport in sizes:
                page = browser.new_page(viewport=viewport, device_scale_factor=1)
                page.goto(server.url + "/accounts/login/")
                page.get_by_label("Username").fill("rita")
                page.get_by_label("Password").fill("rita-password")
                page.get_by_role("button", name="Log in").click()
                expect(page.locator("#live")).to_have_attribute("data-state", "on")
                page.screenshot(path=HERE / f"queue{name}.png", full_page=True)
                page.goto(f"{server.url}/inbox/actions/{ids[0]}")
                page.get_by_label("payload.amount_cents").fill("50.00")
                page.screenshot(path=HERE / f"action{name}.png", full_page=True)
                page.close()
            browser.close()
    finally:
        dep.close()


if __name__ == "__main__":
    main()
