"""The inbox in real headless Chromium (Debian's, driven by Playwright) against `impri serve`."""

from __future__ import annotations

import re
import threading

import httpx
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


def test_a_reviewer_logs_in_and_sees_the_queue(rita, server, agent_key):
    action_id = push(server, agent_key, title="Waiting before login")
    page = rita.log_in()
    expect(page.get_by_role("heading", name="Queue")).to_be_visible()
    expect(row(page, action_id)).to_contain_text("Waiting before login")
    expect(page.locator(".who")).to_have_text("rita")


def test_a_wrong_password_keeps_the_door_shut(chromium, server, agent_key):
    intruder = Reviewer(chromium, server, "rita")
    page = intruder.page()
    page.goto(server.url + "/accounts/login/")
    page.get_by_label("Username").fill("rita")
    page.get_by_label("Password").fill("guess")
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("alert")).to_be_visible()
    expect(page).to_have_url(re.compile("/accounts/login/"))
    intruder.close()


def test_a_pushed_action_appears_in_the_open_queue_without_a_reload(rita, server, agent_key):
    page = rita.log_in()
    page.evaluate("window.__samePage = 'yes'")
    action_id = push(server, agent_key, title="Arrives live")
    expect(row(page, action_id)).to_contain_text("Arrives live")
    expect(page.locator("#rows li.row").first).to_have_id(f"row-{action_id}")  # newest first
    assert page.evaluate("window.__samePage") == "yes"  # the page was never reloaded
    assert page.evaluate("window.__violations") == []


def test_an_edited_approval_reaches_the_agent_and_leaves_every_queue(rita, sam, server, agent_key):
    sam_queue = sam.log_in()
    action_id = push(server, agent_key, title="Refund $84.00 on order 20001")
    expect(row(sam_queue, action_id)).to_be_visible()
    sam_action = sam.open_action(action_id)

    decision: dict = {}

    def wait_like_an_agent():
        with server.client(agent_key, timeout=90) as client:
            answer = client.get(f"/actions/{action_id}/decision", params={"timeout_s": 60})
            decision.update(answer.json(), http_status=answer.status_code)

    waiter = threading.Thread(target=wait_like_an_agent, daemon=True)
    waiter.start()

    page = rita.log_in()
    row(page, action_id).get_by_role("link").click()
    expect(page).to_have_url(f"{server.url}/inbox/actions/{action_id}")
    amount = page.get_by_label("payload.amount_cents")
    expect(amount).to_have_value("84.00")  # typed in dollars; the payload keeps cents
    amount.fill("50.00")
    expect(page.locator("output.money-preview")).to_have_text("= $50.00 USD")
    expect(page.locator("#decision button.approve")).to_have_text("Approve $50.00 USD")
    page.get_by_role("button", name="Approve").click()
    expect(page.locator("#action")).to_have_attribute("data-status", "approved")
    expect(page.locator("#live-banner")).to_contain_text("Approved by you")

    waiter.join(timeout=90)
    assert decision["http_status"] == 200
    assert decision["status"] == "approved"
    assert decision["payload"]["amount_cents"] == 5000
    assert decision["edited_by_human"] is True
    assert decision["decided_by"] == {"type": "reviewer", "name": "rita"}

    # Sam's two pages, open all along: the row leaves, the form locks and says who and when.
    expect(row(sam_queue, action_id)).to_have_count(0)
    expect(sam_action.locator("#live-banner")).to_contain_text(
        re.compile(r"Approved by rita \d+ s ago")
    )
    expect(sam_action.get_by_role("button", name="Approve")).to_be_disabled()
    expect(sam_action.get_by_role("button", name="Reject")).to_be_disabled()
    assert sam.dialogs == [] and rita.dialogs == []


DUAL_RULES = """
rules:
  - name: dual control
    kind: payment.dual
    then: review
    approvals_required: 2
"""


def test_a_second_reviewer_cannot_approve_a_figure_changed_under_them(
    rita, sam, server, agent_key, deployment, tmp_path
):
    rules_file = tmp_path / "dual.yaml"
    rules_file.write_text(DUAL_RULES)
    deployment.impri("rules", "import", str(rules_file))
    action_id = push(server, agent_key, kind="payment.dual", title="Refund $84.00 on order 20009")
    sam.log_in()
    sam_page = sam.open_action(action_id)  # sam reads $84.00 and goes for coffee
    expect(sam_page.locator("#decision button.approve")).to_have_text("Approve $84.00 USD")

    rita.log_in()
    page = rita.open_action(action_id)
    page.get_by_label("payload.amount_cents").fill("50.00")
    page.get_by_role("button", name="Approve").click()
    expect(page.locator("#reviews")).to_contain_text("you approved")
    expect(page.locator("#action")).to_have_attribute("data-status", "pending")

    sam_page.get_by_role("button", name="Approve").click()
    stale = sam_page.locator("#stale-payload")
    expect(stale).to_contain_text("Nothing was approved")
    expect(stale).to_contain_text("payload.amount_cents is now 5000")
    expect(stale).to_contain_text("$50.00 USD")
    expect(sam_page.locator("#action")).to_have_attribute("data-status", "pending")
    status = server.client(agent_key).get(f"/actions/{action_id}").json()["status"]
    assert status == "pending"

    # Now sam has seen $50.00: the refreshed form names that payload and approves it.
    expect(sam_page.locator("#decision button.approve")).to_have_text("Approve $50.00 USD")
    sam_page.get_by_role("button", name="Approve").click()
    expect(sam_page.locator("#action")).to_have_attribute("data-status", "approved")
    answer = server.client(agent_key).get(f"/actions/{action_id}").json()
    assert (answer["status"], answer["payload"]["amount_cents"]) == ("approved", 5000)
    rules_file.write_text("rules: []\n")
    deployment.impri("rules", "import", str(rules_file), "--allow-empty")  # back to no rules


def test_a_late_decision_is_refused_on_the_page(rita, sam, server, agent_key):
    action_id = push(server, agent_key, title="Two reviewers, one answer")
    rita_page = rita.log_in()
    rita_page.goto(f"{server.url}/inbox/actions/{action_id}")
    sam.log_in()
    # Sam's page has no socket, so it never hears of Rita's decision: only the server can refuse.
    sam_page = sam.page()
    sam_page.add_init_script("delete window.WebSocket")
    sam_page.goto(f"{server.url}/inbox/actions/{action_id}")
    rita_page.get_by_role("button", name="Approve").click()
    expect(rita_page.locator("#action")).to_have_attribute("data-status", "approved")
    sam_page.get_by_label("Note to the agent").fill("not convinced")
    sam_page.get_by_role("button", name="Reject").click()
    expect(sam_page.get_by_role("alert").filter(has_text="Too late")).to_be_visible()
    expect(sam_page.locator("#action")).to_have_attribute("data-status", "approved")
    with server.client(agent_key) as client:
        assert client.get(f"/actions/{action_id}").json()["status"] == "approved"


def test_keyboard_approve(rita, server, agent_key):
    page = rita.log_in()
    action_id = push(server, agent_key, title="Approve me with keys")
    target = row(page, action_id)
    expect(target).to_be_visible()
    page.keyboard.press("j")
    expect(page.locator("#rows li.row.selected")).to_have_count(1)
    for _ in range(60):
        if "selected" in (target.get_attribute("class") or ""):
            break
        page.keyboard.press("j")
    page.keyboard.press("Enter")
    expect(page).to_have_url(f"{server.url}/inbox/actions/{action_id}")
    rita.wait_live(page)
    page.keyboard.press("?")
    expect(page.get_by_role("dialog")).to_be_visible()
    page.keyboard.press("Escape")
    expect(page.get_by_role("dialog")).to_be_hidden()
    page.keyboard.press("a")
    expect(page.get_by_text("to approve, Esc to cancel")).to_be_visible()
    expect(page.locator("#action")).to_have_attribute(
        "data-status", "pending"
    )  # one key never decides
    page.keyboard.press("a")
    expect(page.locator("#action")).to_have_attribute("data-status", "approved")
    with server.client(agent_key) as client:
        answer = client.get(f"/actions/{action_id}").json()
    assert answer["status"] == "approved"
    assert answer["decided_by"] == {"type": "reviewer", "name": "rita"}


def test_keyboard_edit_then_reject(rita, server, agent_key):
    action_id = push(server, agent_key, title="Reject me with keys")
    page = rita.log_in()
    page.goto(f"{server.url}/inbox/actions/{action_id}")
    page.keyboard.press("e")
    expect(page.get_by_label("payload.amount_cents")).to_be_focused()
    page.keyboard.press("Escape")
    page.keyboard.press("r")
    expect(page.get_by_label("Note to the agent")).to_be_focused()
    page.keyboard.type("duplicate of yesterday's refund")
    page.keyboard.press("Control+Enter")
    expect(page.locator("#action")).to_have_attribute("data-status", "rejected")
    with server.client(agent_key) as client:
        assert (
            client.get(f"/actions/{action_id}").json()["note"] == "duplicate of yesterday's refund"
        )


HOSTILE = (
    "<script>window.__pwned = 1; alert('script')</script>"
    "<img src=x onerror=\"window.__pwned = 2; alert('img')\">"
    "<svg onload=\"window.__pwned = 3; alert('svg')\"><script>alert('svg script')</script></svg>"
    "<iframe src=\"javascript:alert('frame')\"></iframe>"
    "<a href=\"javascript:alert('raw link')\">raw link</a>"
)


def test_hostile_agent_text_runs_nothing(rita, server, agent_key):
    page = rita.log_in()
    action_id = push(
        server,
        agent_key,
        title="Refund <img src=x onerror=alert('title')> \u202eevil",
        preview={
            "format": "markdown",
            "body": HOSTILE
            + "\n\n[click me](javascript:alert('md link')) "
            + "[data](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==) "
            + "![pixel](https://tracker.example/p.png) <style>body{display:none}</style>",
        },
        payload={"order_id": HOSTILE, "amount_cents": 100, "currency": "USD", "note": HOSTILE},
        context={"customer_message": HOSTILE, HOSTILE: {"nested": [HOSTILE]}},
    )
    # It arrives live (the htmx swap path) and then as a page of its own.
    expect(row(page, action_id)).to_be_visible()
    action_page = rita.open_action(action_id)
    expect(action_page.locator(".preview")).to_contain_text("<script>window.__pwned = 1;")
    for link in action_page.locator(".preview a, .context a").all():
        assert link.get_attribute("href", timeout=1000).startswith(("http://", "https://"))
    action_page.get_by_text("raw link").first.click()  # text, not a link: nothing happens
    for seen in (page, action_page):
        assert seen.evaluate("window.__pwned") is None
        assert seen.evaluate("window.__violations") == []
        scripts = seen.evaluate("[...document.scripts].map(s => s.getAttribute('src'))")
        assert all(src and src.startswith("/static/inbox/") for src in scripts)
        assert (
            seen.evaluate(
                "[...document.querySelectorAll('*')].some(el =>"
                " [...el.attributes].some(a => a.name.startsWith('on')))"
            )
            is False
        )
        assert seen.locator("iframe, svg, img, object, embed").count() == 0
    expect(action_page.locator(".hidden-char")).to_have_text(["U+202E"])
    assert rita.dialogs == []


def test_spoofed_amounts_are_said_out_loud(rita, server, agent_key):
    decoy = "amount\u200b_cents"
    action_id = push(
        server,
        agent_key,
        kind="billing.refund",  # declares nothing (payment.refund would refuse this at push)
        title="Refund $84.00 on order 10432",
        payload={"amount_cents": "840000", decoy: 8400, "currency": "usd\u202e"},
        editable=[f"payload.{decoy}"],
    )
    rita.log_in()
    page = rita.open_action(action_id)
    warning = page.locator("#money-warning")
    expect(warning).to_be_visible()
    expect(warning).to_contain_text('payload.amount_cents is the text "840000"')
    expect(warning).to_contain_text("usdU+202E")
    expect(page.locator("#amount-warning")).to_contain_text("8,400.00")  # not the title's $84
    expect(page.locator(".will-happen .money")).to_have_text("8,400.00")
    label = page.locator("#decision .edit-field label")
    expect(label).to_contain_text("payload.amountU+200B_cents")
    expect(label).to_contain_text("hidden characters in this path")
    assert rita.dialogs == []


def test_decided_actions_are_in_the_history(rita, server, agent_key):
    action_id = push(server, agent_key, title="For the history")
    page = rita.log_in()
    page.goto(f"{server.url}/inbox/actions/{action_id}")
    page.get_by_label("Reason code").select_option("policy")
    page.get_by_role("button", name="Reject").click()
    expect(page.locator("#action")).to_have_attribute("data-status", "rejected")
    page.get_by_role("link", name="Decided").click()
    expect(row(page, action_id)).to_contain_text("rejected")
    expect(row(page, action_id)).to_contain_text("by rita")


def test_filters_narrow_the_queue_in_place(rita, server, agent_key):
    wanted = push(server, agent_key, title="Filter me in", kind="payment.chargeback")
    other = push(server, agent_key, title="Filter me out")
    page = rita.log_in()
    page.evaluate("window.__samePage = 'yes'")
    page.get_by_label("Search").fill("Filter me in")
    expect(row(page, other)).to_have_count(0)
    expect(row(page, wanted)).to_be_visible()
    expect(page).to_have_url(re.compile(r"q=Filter(%20|\+)me(%20|\+)in"))
    page.get_by_label("Order").select_option("urgent")
    expect(page).to_have_url(re.compile(r"sort=urgent"))
    expect(row(page, wanted)).to_be_visible()
    assert page.evaluate("window.__samePage") == "yes"
    page.get_by_label("Search").fill("nothing matches this")
    expect(page.get_by_text("No pending action matches these filters")).to_be_visible()


def test_the_queue_works_on_a_phone(chromium, server, agent_key):
    person = Reviewer(chromium, server, "rita")
    person.context.close()
    person.context = chromium.new_context(viewport={"width": 390, "height": 844}, is_mobile=True)
    page = person.log_in()
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 390
    page.locator("#rows a.row-link").first.click()
    expect(page.get_by_role("button", name="Approve")).to_be_visible()
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    person.close()


def test_the_page_works_without_javascript(chromium, server, agent_key):
    action_id = push(server, agent_key, title="No script needed")
    context = chromium.new_context(java_script_enabled=False)
    page = context.new_page()
    page.goto(server.url + "/accounts/login/")
    page.get_by_label("Username").fill("rita")
    page.get_by_label("Password").fill("rita-password")
    page.get_by_role("button", name="Log in").click()
    page.get_by_label("Search").fill("No script needed")
    page.get_by_role("button", name="Filter").click()
    page.get_by_role("link", name="No script needed").click()
    page.get_by_label("payload.amount_cents").fill("40.00")
    page.get_by_role("button", name="Approve").click()
    expect(page.locator("#action")).to_have_attribute("data-status", "approved")
    context.close()
    with httpx.Client(base_url=server.url) as client:
        answer = client.get(
            f"/api/v1/actions/{action_id}", headers={"Authorization": f"Bearer {agent_key}"}
        ).json()
    assert answer["payload"]["amount_cents"] == 4000
