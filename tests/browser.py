"""The inbox's browser tests' parts: Debian's Chromium through Playwright, one deployment and
server a module, an agent with two reviewers (rita and sam), and a reviewer at a browser.

A module imports the fixtures it uses (``from tests.browser import chromium, server, ...``);
one that needs its deployment made otherwise defines its own ``deployment`` fixture, which
the imported ``server`` then starts (pytest finds a fixture by name from the test's module).
"""

from __future__ import annotations

import re
import uuid

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from tests.factories import refund_body
from tests.live import Deployment, last_word

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
# Collects CSP violations and marks the page, before any of the page's own scripts run.
WATCH = """
window.__violations = [];
document.addEventListener('securitypolicyviolation', e => window.__violations.push(e.violatedDirective + ' ' + e.blockedURI));
"""


@pytest.fixture(scope="module")
def deployment():
    dep = Deployment()
    yield dep
    dep.close()


@pytest.fixture(scope="module")
def server(deployment):
    return deployment.start_server()


@pytest.fixture(scope="module")
def agent_key(deployment, server) -> str:
    """The agent support-bot's key; rita and sam made beside it, in one process."""
    key, _, _ = deployment.commands(
        ("createagent", "support-bot"),
        ("createreviewer", "rita", "--password", "rita-password"),
        ("createreviewer", "sam", "--password", "sam-password"),
    )
    return last_word(key)


@pytest.fixture(scope="module")
def chromium():
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


class Reviewer:
    """One person at one browser: their own context (cookies), pages, and the dialogs seen."""

    def __init__(self, chromium: Browser, server, username: str):
        self.context = chromium.new_context(viewport={"width": 1280, "height": 900})
        self.context.add_init_script(WATCH)
        self.server = server
        self.username = username
        self.dialogs: list[str] = []

    def page(self) -> Page:
        page = self.context.new_page()
        page.on("dialog", lambda dialog: (self.dialogs.append(dialog.message), dialog.dismiss()))
        return page

    def log_in(self) -> Page:
        page = self.page()
        page.goto(self.server.url + "/inbox/")
        expect(page).to_have_url(re.compile(r"/accounts/login/\?next="))
        page.get_by_label("Username").fill(self.username)
        page.get_by_label("Password").fill(f"{self.username}-password")
        page.get_by_role("button", name="Log in").click()
        expect(page).to_have_url(self.server.url + "/inbox/")
        self.wait_live(page)
        return page

    def wait_live(self, page: Page) -> None:
        # The socket has joined the reviewer's groups once it says hello.
        expect(page.locator("#live")).to_have_attribute("data-state", "on")

    def open_action(self, action_id: str) -> Page:
        page = self.page()
        page.goto(f"{self.server.url}/inbox/actions/{action_id}")
        self.wait_live(page)
        return page

    def close(self) -> None:
        self.context.close()


@pytest.fixture
def rita(chromium, server, agent_key):
    person = Reviewer(chromium, server, "rita")
    yield person
    person.close()


@pytest.fixture
def sam(chromium, server, agent_key):
    person = Reviewer(chromium, server, "sam")
    yield person
    person.close()


def push(server, key: str, **overrides) -> str:
    body = refund_body(**overrides)
    body.setdefault("idempotency_key", uuid.uuid4().hex)
    response = server.client(key).post("/actions", json=body)
    assert response.status_code == 201, response.text
    return response.json()["action_id"]


def row(page: Page, action_id: str):
    return page.locator(f"#row-{action_id}")
