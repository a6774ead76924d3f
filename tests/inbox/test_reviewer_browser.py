"""Claims, live counters, request changes, results and a phone, in real headless Chromium."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.browser import (  # noqa: F401  (fixtures)
    Reviewer,
    agent_key,
    chromium,
    deployment,
    push,
    rita,
    row,
    sam,
    server,
)

pytestmark = pytest.mark.e2e


def pending_count(page) -> int:
    return int(page.locator("#queue-counts [data-count=pending]").inner_text())


def test_a_claim_shows_live_to_another_reviewer_and_goes_when_its_reviewer_leaves(
    rita, sam, server, agent_key
):
    action_id = push(server, agent_key, title="Claim me")
    sam_queue = sam.log_in()
    rita.log_in()
    rita_page = rita.open_action(action_id)
    rita_page.get_by_role("button", name="I'm on it").click()
    expect(rita_page.locator("#claim")).to_contain_text("You are on it")

    # Sam's open queue learns it without a reload.
    expect(row(sam_queue, action_id)).to_contain_text("rita is on it")
    sam_page = sam.open_action(action_id)
    expect(sam_page.locator("#claim")).to_contain_text("rita is on it")
    # Advisory: sam's forms stay open.
    expect(sam_page.get_by_role("button", name="Reject")).to_be_enabled()

    # Explicit release, then claim again, then leave the page: each shows live on sam's side.
    rita_page.get_by_role("button", name="Release").click()
    expect(sam_page.get_by_role("button", name="I'm on it")).to_be_visible()
    expect(row(sam_queue, action_id)).not_to_contain_text("is on it")
    rita_page.get_by_role("button", name="I'm on it").click()
    expect(sam_page.locator("#claim")).to_contain_text("rita is on it")
    rita_page.close()
    expect(sam_page.get_by_role("button", name="I'm on it")).to_be_visible()
    expect(row(sam_queue, action_id)).not_to_contain_text("is on it")


def test_a_claim_goes_when_the_reviewers_socket_goes(rita, sam, server, agent_key):
    action_id = push(server, agent_key, title="Claimed, then the browser dies")
    sam.log_in()
    sam_page = sam.open_action(action_id)
    rita.log_in()
    rita_page = rita.open_action(action_id)
    rita_page.get_by_role("button", name="I'm on it").click()
    expect(sam_page.locator("#claim")).to_contain_text("rita is on it")
    # The browser dies without a word: no beacon leaves, only the socket closes.
    rita_page.evaluate("navigator.sendBeacon = () => true")
    rita.context.close()
    expect(sam_page.get_by_role("button", name="I'm on it")).to_be_visible(timeout=15_000)


def test_the_counters_follow_live_arrivals(rita, server, agent_key):
    page = rita.log_in()
    page.evaluate("window.__samePage = 'yes'")
    before = pending_count(page)
    push(server, agent_key, title="Counted live")
    expect(page.locator("#queue-counts [data-count=pending]")).to_have_text(str(before + 1))
    expect(page).to_have_title(re.compile(rf"^\({before + 1}\) Queue"))
    # Filtered to something else: the row does not show, the "pending for you" count still moves.
    page.get_by_label("Search").fill("nothing like this title")
    expect(page.get_by_text("No pending action matches these filters")).to_be_visible()
    push(server, agent_key, title="Counted though filtered out")
    expect(page.locator("#queue-counts [data-count=pending]")).to_have_text(str(before + 2))
    assert page.evaluate("window.__samePage") == "yes"


def test_request_changes_in_the_browser_then_the_replacement_links_back(
    rita, sam, server, agent_key
):
    action_id = push(server, agent_key, title="Refund the whole order")
    sam.log_in()
    sam_page = sam.open_action(action_id)
    rita.log_in()
    page = rita.open_action(action_id)
    page.get_by_label("What should change").fill("Only the mug: $12.00")
    page.get_by_role("button", name="Request changes").click()
    expect(page.locator("#action")).to_have_attribute("data-status", "changes_requested")
    expect(page.locator("#live-banner")).to_contain_text("Changes requested by you")
    # Sam's open page settles live, forms locked.
    expect(sam_page.locator("#live-banner")).to_contain_text("Changes requested by rita")
    with server.client(agent_key) as agent:
        decision = agent.get(f"/actions/{action_id}/decision", params={"timeout_s": 0}).json()
    assert (decision["status"], decision["note"]) == ("changes_requested", "Only the mug: $12.00")
    replacement = push(server, agent_key, title="Refund the mug", supersedes=action_id)
    page.goto(f"{server.url}/inbox/actions/{replacement}")
    page.locator("[data-supersedes]").click()
    expect(page).to_have_url(re.compile(action_id))
    expect(page.locator("[data-superseded-by]")).to_have_text(replacement)


def test_the_result_shows_live_with_who_executed_it(rita, server, agent_key):
    action_id = push(server, agent_key, title="Execute and report")
    rita.log_in()
    page = rita.open_action(action_id)
    page.get_by_role("button", name="Approve").click()
    expect(page.locator("#action")).to_have_attribute("data-status", "approved")
    with server.client(agent_key) as agent:
        reported = agent.post(
            f"/actions/{action_id}/result",
            json={"status": "executed", "detail": {"transaction_id": "re_LIVE42"}},
        )
        assert reported.status_code == 200, reported.text
    result = page.locator("#result")
    expect(result).to_contain_text("Executed by the agent support-bot")
    expect(result).to_contain_text("re_LIVE42")
    expect(page.locator("#live-banner")).to_contain_text("Approved by you")


def test_the_action_page_fits_a_phone(chromium, server, agent_key):
    long_word = "x" * 400
    action_id = push(
        server,
        agent_key,
        title="Refund $84.00 on order " + "9" * 120,
        payload={
            "order_id": "10432",
            "amount_cents": 8400,
            "currency": "USD",
            "note": long_word,
            "lines": [{"sku": "MUG-" + "7" * 150, "meta": {"deep": {"deeper": long_word}}}],
        },
        context={"raw": {"json": long_word, "url": "https://example.com/" + long_word}},
    )
    person = Reviewer(chromium, server, "rita")
    person.context.close()
    person.context = chromium.new_context(viewport={"width": 375, "height": 800}, is_mobile=True)
    person.log_in()
    page = person.open_action(action_id)
    expect(page.get_by_role("button", name="Approve")).to_be_visible()
    assert page.evaluate("document.documentElement.scrollWidth") <= 375
    page.goto(server.url + "/inbox/")
    assert page.evaluate("document.documentElement.scrollWidth") <= 375
    person.close()
