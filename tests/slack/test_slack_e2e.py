"""Approving from Slack against a running `impri serve`: the background (the embedded ticker,
or a Celery worker and beat on the scaled leg) posts the message, a signed click over HTTP
approves, and the background updates the message."""

from __future__ import annotations

import httpx
import pytest

from tests.factories import refund_body
from tests.live import Deployment
from tests.project.test_worker_e2e import Background
from tests.slack_fake import FakeSlack, form, sign

pytestmark = pytest.mark.e2e

SECRET = "e2e-signing-secret"

SETUP = """
from django.contrib.auth.models import Group, User
from slackapp.models import SlackChannel
User.objects.filter(username="rita").update(email="rita@example.com")
SlackChannel.objects.create(group=Group.objects.get(name="reviewers"), channel="C0REFUNDS")
"""


@pytest.fixture
def slack():
    fake = FakeSlack()
    yield fake
    fake.close()


def test_a_signed_click_on_a_posted_message_approves_and_the_message_updates(slack):
    slack.member("U0RITA", "rita@example.com")
    dep = Deployment(
        IMPRI_TICK_S="0.3",
        IMPRI_SLACK_BOT_TOKEN="xoxb-e2e",
        IMPRI_SLACK_SIGNING_SECRET=SECRET,
        IMPRI_SLACK_API_URL=slack.url,
    )
    background = None
    try:
        background = Background(dep)
        background.start()
        server = background.server
        agent_key = dep.last_word("createagent", "support-bot")
        dep.impri("createreviewer", "rita")
        dep.impri("shell", "-c", SETUP)

        pushed = server.client(agent_key).post("/actions", json=refund_body())
        assert pushed.status_code == 201, pushed.text
        action_id = pushed.json()["action_id"]

        [message] = slack.wait_for("chat.postMessage")
        [row] = [b for b in message["blocks"] if b["type"] == "actions"]
        body = form(
            {
                "type": "block_actions",
                "user": {"id": "U0RITA"},
                "channel": {"id": "C0REFUNDS"},
                "actions": [
                    {"action_id": "approve", "block_id": row["block_id"], "value": action_id}
                ],
            }
        )
        url = server.url + "/integrations/slack/interactivity"
        headers = {"Content-Type": "application/x-www-form-urlencoded"}
        forged = httpx.post(url, content=body, headers={**headers, **sign("nope", body)})
        assert forged.status_code == 401
        clicked = httpx.post(url, content=body, headers={**headers, **sign(SECRET, body)})
        assert clicked.status_code == 200, clicked.text

        decision = server.client(agent_key).get(
            f"/actions/{action_id}/decision", params={"timeout_s": 10}
        )
        assert decision.json()["status"] == "approved"
        assert decision.json()["decided_by"] == {"type": "reviewer", "name": "rita"}
        [update] = slack.wait_for("chat.update")
        assert update["ts"] == "1700000000.000001" and update["channel"] == "C0REFUNDS"
        assert all(b["type"] != "actions" for b in update["blocks"])
        assert "Approved* by rita" in str(update["blocks"])
    finally:
        if background is not None:
            background.close()
        dep.close()
