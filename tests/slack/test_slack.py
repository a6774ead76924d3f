"""Approving from Slack: Block Kit messages, signed interactivity, decisions through the service.

Slack's Web API is a local receiver (tests/slack_fake.py) that slack_sdk reaches
through ``IMPRI_SLACK_API_URL``; interaction payloads are signed here as Slack
signs them and posted to ``/integrations/slack/interactivity``.
"""

from __future__ import annotations

import json
import time
from datetime import timedelta

import pytest
from django.contrib.auth.models import Group
from django.test import Client
from django.utils import timezone

from approvals import services
from approvals.models import Action, ActionStatus
from approvals.presenters import inbox_url
from audit.models import AuditEvent
from slackapp import delivery
from slackapp.models import SlackChannel, SlackMessage, SlackUserLink
from tests.conftest import make_reviewer
from tests.factories import install_rules, make_action
from tests.slack_fake import FakeSlack, form, sign

SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
URL = "/integrations/slack/interactivity"
BASE = "https://impri.example.com"
CHANNEL = "C0REFUNDS"


@pytest.fixture
def slack(settings):
    fake = FakeSlack()
    settings.IMPRI_SLACK_BOT_TOKEN = "xoxb-test-token"
    settings.IMPRI_SLACK_SIGNING_SECRET = SECRET
    settings.IMPRI_SLACK_API_URL = fake.url
    settings.IMPRI_BASE_URL = BASE
    yield fake
    fake.close()


@pytest.fixture
def team(db, slack):
    """The default group posts to #refunds; rita maps by her confirmed Slack e-mail."""
    rita = make_reviewer("rita", "reviewers").user
    rita.email = "Rita@Example.com"
    rita.save()
    SlackChannel.objects.create(group=Group.objects.get(name="reviewers"), channel=CHANNEL)
    slack.member("U0RITA", "rita@example.com")
    return rita


def post(payload: dict, secret: str = SECRET, timestamp: int | None = None, headers=None):
    body = form(payload)
    signed = sign(secret, body, timestamp) if headers is None else headers
    return Client().post(
        URL, body, content_type="application/x-www-form-urlencoded", headers=signed
    )


def click(action: Action, verb: str, user: str = "U0RITA", block_id: str | None = None):
    if block_id is None:
        block_id = "decide:" + services.payload_sha256(action.payload)
    return post(
        {
            "type": "block_actions",
            "user": {"id": user},
            "channel": {"id": CHANNEL},
            "container": {"type": "message", "channel_id": CHANNEL, "message_ts": "1"},
            "trigger_id": "1337.42.abcd",
            "response_url": "https://hooks.slack.invalid/actions/1",
            "actions": [
                {"action_id": verb, "block_id": block_id, "value": action.pk, "type": "button"}
            ],
        }
    )


def posted_message(slack: FakeSlack) -> dict:
    assert delivery.send_due() >= 1
    [message] = slack.to("chat.postMessage")
    return message


def buttons(message: dict) -> dict:
    [actions] = [b for b in message["blocks"] if b["type"] == "actions"]
    return actions


def all_text(message: dict) -> str:
    return json.dumps(message["blocks"], ensure_ascii=False) + message["text"]


def ephemeral_text(slack: FakeSlack) -> str:
    [note] = slack.to("chat.postEphemeral")
    assert note["channel"] == CHANNEL and note["user"]
    return note["text"]


def test_the_message_shows_the_action_with_buttons_and_approve_decides_it(agent, team, slack):
    action = make_action(agent.agent)
    message = posted_message(slack)

    assert message["channel"] == CHANNEL
    assert slack.calls[0].authorization == "Bearer xoxb-test-token"
    text = all_text(message)
    assert "$84.00 USD" in text and "support-bot" in text
    assert "Refund $84.00 USD · order 10432" in text  # what will happen
    assert inbox_url(action, BASE) in text
    row = buttons(message)
    assert [e["action_id"] for e in row["elements"]] == ["approve", "edit", "reject", "open"]
    assert {e.get("value") for e in row["elements"][:3]} == {action.pk}
    assert row["block_id"] == "decide:" + services.payload_sha256(action.payload)

    answer = click(action, "approve", block_id=row["block_id"])

    assert answer.status_code == 200
    action.refresh_from_db()
    assert action.status == ActionStatus.APPROVED and action.decided_by_user == team
    event = AuditEvent.objects.get(action_id=action.pk, event="action.approved")
    assert event.actor_id == "rita"
    assert event.data["via"] == "slack" and event.data["slack_user_id"] == "U0RITA"
    assert slack.to("chat.postEphemeral") == []
    page = Client()
    page.force_login(team)
    assert "from Slack" in page.get(f"/inbox/actions/{action.pk}").content.decode()

    # The message is updated in place: who decided what, and no buttons.
    assert delivery.send_due() == 1
    [update] = slack.to("chat.update")
    assert update["channel"] == CHANNEL and update["ts"] == "1700000000.000001"
    assert all(b["type"] != "actions" for b in update["blocks"])
    assert "*Approved* by rita" in all_text(update)
    assert delivery.send_due() == 0  # delivered: nothing more to send


def test_reject_from_slack_rejects_and_updates_the_message(agent, team, slack):
    action = make_action(agent.agent)
    posted_message(slack)

    assert click(action, "reject").status_code == 200

    action.refresh_from_db()
    assert action.status == ActionStatus.REJECTED and action.decided_by_user == team
    event = AuditEvent.objects.get(action_id=action.pk, event="action.rejected")
    assert event.data["via"] == "slack"
    delivery.send_due()
    [update] = slack.to("chat.update")
    assert "*Rejected* by rita" in all_text(update)
    assert all(b["type"] != "actions" for b in update["blocks"])


@pytest.mark.parametrize(
    "headers",
    [
        pytest.param("wrong-secret", id="bad signature"),
        pytest.param("stale", id="stale timestamp"),
        pytest.param({}, id="no signature"),
        pytest.param(
            {"X-Slack-Request-Timestamp": "soon", "X-Slack-Signature": "v0=00"}, id="junk"
        ),
    ],
)
def test_an_unsigned_bad_or_stale_request_is_refused_with_401(agent, team, slack, headers):
    action = make_action(agent.agent)
    payload = {
        "type": "block_actions",
        "user": {"id": "U0RITA"},
        "channel": {"id": CHANNEL},
        "actions": [{"action_id": "approve", "value": action.pk}],
    }
    if headers == "wrong-secret":
        answer = post(payload, secret="not-the-secret")
    elif headers == "stale":
        answer = post(payload, timestamp=int(time.time()) - 6 * 60)  # correctly signed, too old
    else:
        answer = post(payload, headers=headers)

    assert answer.status_code == 401
    assert "X-Slack-Signature" in answer.json()["detail"]
    action.refresh_from_db()
    assert action.status == ActionStatus.PENDING
    assert slack.calls == []


def test_without_a_signing_secret_everything_is_refused(agent, team, slack, settings):
    settings.IMPRI_SLACK_SIGNING_SECRET = ""
    action = make_action(agent.agent)
    assert click(action, "approve").status_code == 401
    assert Action.objects.get(pk=action.pk).status == ActionStatus.PENDING


def test_a_signed_request_without_a_bot_token_or_for_no_action_decides_nothing(
    agent, team, slack, settings
):
    action = make_action(agent.agent)
    settings.IMPRI_SLACK_BOT_TOKEN = ""
    assert click(action, "approve").status_code == 200
    assert Action.objects.get(pk=action.pk).status == ActionStatus.PENDING
    settings.IMPRI_SLACK_BOT_TOKEN = "xoxb-test-token"
    missing = Action(pk="act_doesnotexist000000000000", payload={})
    assert click(missing, "approve").status_code == 200
    assert slack.calls == []


@pytest.mark.parametrize(
    "who",
    ["unknown member", "unconfirmed e-mail", "e-mail of nobody", "bot"],
)
def test_an_unmapped_slack_user_is_refused_with_the_inbox_link(agent, team, slack, who):
    user_id = {
        "unknown member": "U0NOBODY",
        "unconfirmed e-mail": "U0UNCONF",
        "e-mail of nobody": "U0STRANGER",
        "bot": "U0BOT",
    }[who]
    slack.member("U0UNCONF", "rita@example.com", confirmed=False)
    slack.member("U0STRANGER", "stranger@example.com")
    slack.member("U0BOT", "rita@example.com", is_bot=True)
    action = make_action(agent.agent)

    assert click(action, "approve", user=user_id).status_code == 200

    assert Action.objects.get(pk=action.pk).status == ActionStatus.PENDING
    text = ephemeral_text(slack)
    assert "not linked to an Impri reviewer" in text
    assert f"<{inbox_url(action, BASE)}|Open it in Impri>" in text


def test_a_user_outside_the_actions_group_is_refused(agent, team, slack):
    mallory = make_reviewer("mallory", "marketing").user
    SlackUserLink.objects.create(slack_user_id="U0MALLORY", user=mallory)
    action = make_action(agent.agent)

    assert click(action, "approve", user="U0MALLORY").status_code == 200
    assert click(action, "reject", user="U0MALLORY").status_code == 200

    assert Action.objects.get(pk=action.pk).status == ActionStatus.PENDING
    notes = [n["text"] for n in slack.to("chat.postEphemeral")]
    assert len(notes) == 2
    assert all("not a reviewer in the group" in n and inbox_url(action, BASE) in n for n in notes)
    # An explicit link needs no users.info look-up.
    assert slack.to("users.info") == []


def test_an_explicit_link_maps_a_member_whose_e_mail_differs(agent, team, slack):
    SlackUserLink.objects.create(slack_user_id="W0RITA2", user=team)
    action = make_action(agent.agent)
    assert click(action, "approve", user="W0RITA2").status_code == 200
    assert Action.objects.get(pk=action.pk).status == ActionStatus.APPROVED
    assert AuditEvent.objects.filter(event="slack.user_linked").exists()


def test_an_amount_above_the_slack_limit_is_approved_in_the_inbox_only(
    agent, team, slack, settings
):
    settings.IMPRI_SLACK_MAX_APPROVE_CENTS = 50000
    action = make_action(
        agent.agent, payload={"order_id": "7", "amount_cents": 50001, "currency": "USD"}
    )
    message = posted_message(slack)
    assert [e["action_id"] for e in buttons(message)["elements"]] == ["reject", "open"]
    assert "$500.00 USD" in all_text(message)

    assert click(action, "approve").status_code == 200
    assert click(action, "edit").status_code == 200

    assert Action.objects.get(pk=action.pk).status == ActionStatus.PENDING
    notes = [n["text"] for n in slack.to("chat.postEphemeral")]
    assert len(notes) == 2 and slack.to("views.open") == []
    assert all("above $500.00 USD" in n and inbox_url(action, BASE) in n for n in notes)
    # At the limit, Slack may approve.
    at_limit = make_action(
        agent.agent, payload={"order_id": "8", "amount_cents": 50000, "currency": "USD"}
    )
    assert click(at_limit, "approve").status_code == 200
    assert Action.objects.get(pk=at_limit.pk).status == ActionStatus.APPROVED


@pytest.mark.parametrize(
    "payload",
    [
        {"order_id": "9", "refund": {"amount_cents": 5_000_000}, "currency": "USD"},
        {"order_id": "9", "total_cents": 5_000_000, "currency": "USD"},
    ],
    ids=["nested", "another name"],
)
def test_the_slack_limit_reads_every_cents_figure_as_step_up_does(
    agent, team, slack, settings, payload
):
    settings.IMPRI_SLACK_MAX_APPROVE_CENTS = 50000
    # A kind that declares no money, in the migration period (IMPRI_UNDECLARED_KINDS=detect):
    # the detector finds it, nested or under another name.
    settings.IMPRI_UNDECLARED_KINDS = "detect"
    action = make_action(agent.agent, kind="billing.refund", payload=payload, editable=[])
    assert "approve" not in [e["action_id"] for e in buttons(posted_message(slack))["elements"]]
    assert click(action, "approve").status_code == 200
    assert Action.objects.get(pk=action.pk).status == ActionStatus.PENDING
    assert "the most that may be approved from Slack" in ephemeral_text(slack)


@pytest.mark.parametrize(
    "payload",
    [
        {"order_id": "9", "refund": {"amount_cents": 5_000_000}, "currency": "USD"},
        {"order_id": "9", "amount": {"value": 900_000, "currency": "EUR"}},
        {"order_id": "9", "note": "no money at all"},
    ],
    ids=["nested", "adyen object", "no money"],
)
def test_slack_never_approves_a_kind_that_declares_no_money(agent, team, slack, settings, payload):
    settings.IMPRI_SLACK_MAX_APPROVE_CENTS = 50000
    action = make_action(agent.agent, kind="billing.refund", payload=payload, editable=[])
    assert "approve" not in [e["action_id"] for e in buttons(posted_message(slack))["elements"]]
    assert click(action, "approve").status_code == 200
    assert Action.objects.get(pk=action.pk).status == ActionStatus.PENDING
    assert "billing.refund is not declared" in ephemeral_text(slack)


def test_a_staff_account_is_never_mapped_by_e_mail(agent, slack, db):
    boss = make_reviewer("boss", "reviewers").user
    boss.email, boss.is_staff = "boss@example.com", True
    boss.save()
    SlackChannel.objects.create(group=Group.objects.get(name="reviewers"), channel=CHANNEL)
    slack.member("U0BOSS", "boss@example.com")
    action = make_action(agent.agent)
    assert click(action, "approve", user="U0BOSS").status_code == 200
    assert Action.objects.get(pk=action.pk).status == ActionStatus.PENDING
    assert "not linked to an Impri reviewer" in ephemeral_text(slack)
    # An explicit link in admin maps the account.
    SlackUserLink.objects.create(slack_user_id="U0BOSS", user=boss)
    assert click(action, "approve", user="U0BOSS").status_code == 200
    assert Action.objects.get(pk=action.pk).status == ActionStatus.APPROVED


def submit_edit(view: dict, value: str, user: str = "U0RITA", note: str = ""):
    return post(
        {
            "type": "view_submission",
            "user": {"id": user},
            "view": {
                "id": "V0EDIT",
                "callback_id": view["callback_id"],
                "private_metadata": view["private_metadata"],
                "state": {
                    "values": {
                        "edit-0": {"value": {"type": "number_input", "value": value}},
                        "note": {"value": {"type": "plain_text_input", "value": note or None}},
                    }
                },
            },
        }
    )


def test_edit_opens_a_modal_with_the_bounds_and_an_edit_outside_them_is_refused(agent, team, slack):
    action = make_action(agent.agent)

    assert click(action, "edit").status_code == 200

    [opened] = slack.to("views.open")
    assert opened["trigger_id"] == "1337.42.abcd"
    view = opened["view"]
    [field] = [b for b in view["blocks"] if b.get("block_id") == "edit-0"]
    assert field["label"]["text"] == "payload.amount_cents"
    assert field["element"]["type"] == "number_input"
    assert field["element"]["initial_value"] == "8400" and field["element"]["max_value"] == "8400"
    assert "$84.00 USD" in field["hint"]["text"]

    above = submit_edit(view, "9000")
    assert above.status_code == 200
    assert above.json()["response_action"] == "errors"
    assert "edit-0" in above.json()["errors"]
    not_a_number = submit_edit(view, "lots")
    assert not_a_number.json()["errors"] == {"edit-0": "must be a whole number"}
    assert Action.objects.get(pk=action.pk).status == ActionStatus.PENDING

    within = submit_edit(view, "5000", note="half, as agreed")
    assert within.status_code == 200 and within.content == b""
    action.refresh_from_db()
    assert action.status == ActionStatus.APPROVED
    assert action.payload["amount_cents"] == 5000 and action.edited_by_human
    assert action.note == "half, as agreed"
    edited = AuditEvent.objects.get(action_id=action.pk, event="action.edited")
    assert edited.data["via"] == "slack"


def test_settling_anywhere_updates_the_message_without_buttons(agent, team, slack):
    sam = make_reviewer("sam", "reviewers").user
    decided = make_action(agent.agent)
    make_action(agent.agent, expires_in_s=60)
    assert delivery.send_due() == 2
    posted = set(SlackMessage.objects.values_list("ts", flat=True))
    assert len(posted) == 2 and "" not in posted

    services.decide(decided.pk, by=sam, verdict="approve")  # in the inbox or the API
    services.expire_due(now=timezone.now() + timedelta(minutes=5))

    assert delivery.send_due() == 2
    updates = slack.to("chat.update")
    assert {u["ts"] for u in updates} == posted
    texts = sorted(all_text(u) for u in updates)
    assert any("*Approved* by sam" in t for t in texts)
    assert any("*Expired unanswered*" in t for t in texts)
    assert all(b["type"] != "actions" for u in updates for b in u["blocks"])
    # A click on the old message now is too late, and says so.
    assert click(decided, "approve").status_code == 200
    assert "Too late: this action is already approved by sam" in ephemeral_text(slack)


def test_changes_requested_in_the_inbox_updates_the_message_with_the_message(agent, team, slack):
    sam = make_reviewer("sam", "reviewers").user
    action = make_action(agent.agent)
    assert delivery.send_due() == 1
    services.request_changes(action.pk, by=sam, note="Refund the shipping only")
    assert delivery.send_due() == 1
    (update,) = slack.to("chat.update")
    assert "*Changes requested* by sam" in all_text(update)
    assert "Refund the shipping only" in all_text(update)
    assert all(b["type"] != "actions" for b in update["blocks"])


def test_a_group_without_a_channel_gets_no_message(agent, slack, settings):
    make_action(agent.agent)
    assert SlackMessage.objects.count() == 0
    assert delivery.send_due() == 0


def test_a_message_settled_before_it_was_posted_is_never_posted(agent, team, slack):
    action = make_action(agent.agent)
    services.decide(action.pk, by=team, verdict="reject")
    assert delivery.send_due() == 1
    assert slack.to("chat.postMessage") == [] and slack.to("chat.update") == []
    assert SlackMessage.objects.get(action=action).delivered_at is not None


def test_slack_failures_are_retried_and_permanent_ones_given_up(agent, team, slack):
    action = make_action(agent.agent)
    slack.errors["chat.postMessage"] = "ratelimited"
    assert delivery.send_due() == 1
    row = SlackMessage.objects.get(action=action)
    assert row.delivered_at is None and row.gave_up_at is None and "ratelimited" in row.last_error
    slack.errors["chat.postMessage"] = "channel_not_found"
    assert delivery.send_due(now=timezone.now() + timedelta(hours=3)) == 1
    row.refresh_from_db()
    assert row.gave_up_at is not None and "channel_not_found" in row.last_error


def test_four_eyes_from_slack_approve_the_payload_the_message_showed(agent, team, slack):
    install_rules(
        "rules:\n  - name: two reviewers\n    kind: payment.*\n    then: review\n"
        "    group: reviewers\n    approvals_required: 2\n"
    )
    sam = make_reviewer("sam", "reviewers").user
    slack.member("U0SAM", "sam@example.com")
    sam.email = "sam@example.com"
    sam.save()
    action = make_action(agent.agent)
    first = buttons(posted_message(slack))["block_id"]

    # Rita edits and approves in the modal: one approval of two, for the new figure.
    click(action, "edit")
    [opened] = slack.to("views.open")
    assert submit_edit(opened["view"], "5000").content == b""
    assert "1 more needed" in ephemeral_text(slack)
    action.refresh_from_db()
    assert action.status == ActionStatus.PENDING and action.payload["amount_cents"] == 5000

    # Sam clicks the message as first posted: it showed $84, so nothing is approved.
    click(action, "approve", user="U0SAM", block_id=first)
    assert "payload changed" in slack.to("chat.postEphemeral")[-1]["text"]
    assert Action.objects.get(pk=action.pk).status == ActionStatus.PENDING

    # The message was updated to the new figure; approving that one settles it.
    assert delivery.send_due() == 1
    [update] = slack.to("chat.update")
    assert "$50.00 USD" in all_text(update) and "Approvals: rita" in all_text(update)
    click(action, "approve", user="U0SAM", block_id=buttons(update)["block_id"])
    action.refresh_from_db()
    assert action.status == ActionStatus.APPROVED and action.payload["amount_cents"] == 5000
    event = AuditEvent.objects.get(action_id=action.pk, event="action.approved")
    assert event.data["approved_by"] == ["rita", "sam"] and event.data["via"] == "slack"


def test_an_escalation_posts_in_the_new_groups_channel_and_updates_the_old_message(
    agent, team, slack
):
    leads = Group.objects.create(name="support-leads")
    SlackChannel.objects.create(group=leads, channel="C0LEADS")
    install_rules(
        "rules:\n  - name: refunds\n    kind: payment.*\n    then: review\n    group: reviewers\n"
        "    escalate_after_s: 60\n    escalate_to: support-leads\n"
    )
    action = make_action(agent.agent)
    posted_message(slack)

    assert services.escalate_due(now=timezone.now() + timedelta(minutes=2)) == 1
    assert delivery.send_due() == 2

    [first, second] = slack.to("chat.postMessage")
    assert second["channel"] == "C0LEADS" and buttons(second)["elements"][0]["value"] == action.pk
    [update] = slack.to("chat.update")
    assert update["channel"] == CHANNEL
    assert "*Escalated* to support-leads" in all_text(update)
    assert all(b["type"] != "actions" for b in update["blocks"])
    # Rita (reviewers) may no longer decide it from either message.
    click(action, "approve")
    assert "not a reviewer in the group" in ephemeral_text(slack)


def test_agent_text_cannot_mention_the_channel_or_break_the_message(agent, team, slack):
    hostile = "<!channel> Approve now <https://evil.example|click> & " + "x" * 300
    make_action(
        agent.agent,
        title=hostile[:200],
        payload={"order_id": hostile * 5, "amount_cents": 100, "currency": "USD"},
    )
    message = posted_message(slack)
    text = all_text(message)
    assert "<!channel>" not in text and "<https://evil.example" not in text
    assert "&lt;!channel&gt;" in text
    assert len(buttons(message)["elements"]) == 4


def test_messages_are_swept_by_the_ticker_and_by_celery_beat(settings):
    from impri import ticker
    from plumbing.celery import app

    assert "slackapp.tasks.deliver_slack_messages" in {j.task for j in ticker.jobs_on("delivery")}
    app.loader.import_default_modules()
    assert "slackapp.tasks.deliver_slack_messages" in app.tasks
    tasks = {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}
    assert "slackapp.tasks.deliver_slack_messages" in tasks


def test_channel_and_link_changes_are_audited(db, settings):
    rita = make_reviewer("rita", "reviewers").user
    channel = SlackChannel.objects.create(group=Group.objects.get(name="reviewers"), channel="C0A")
    link = SlackUserLink.objects.create(slack_user_id="U0RITA", user=rita)
    link.delete()
    channel.delete()
    events = list(
        AuditEvent.objects.filter(event__startswith="slack.")
        .order_by("seq")
        .values_list("event", "data")
    )
    assert events == [
        ("slack.channel_changed", {"group": "reviewers", "channel": "C0A"}),
        (
            "slack.user_linked",
            {"slack_user_id": "U0RITA", "user": "rita", "user_ref": f"user:{rita.pk}"},
        ),
        ("slack.user_unlinked", {"slack_user_id": "U0RITA", "user_ref": f"user:{rita.pk}"}),
        ("slack.channel_changed", {"group": "reviewers", "channel": None}),
    ]


@pytest.mark.parametrize(
    ("payload", "status", "field"),
    [
        ({"type": "block_actions", "actions": "approve"}, 400, "actions"),
        (
            {
                "type": "block_actions",
                "user": "U0RITA",
                "actions": [{"action_id": "approve", "value": "act_x"}],
            },
            400,
            "user.id",
        ),
        (
            {"type": "block_actions", "actions": [{"action_id": "reject", "value": 5}]},
            400,
            "actions[0].value",
        ),
        ({"type": "block_actions", "actions": [{"action_id": ["approve"]}]}, 200, None),
        ({"type": "view_submission", "view": "edit"}, 200, None),
        (
            {
                "type": "view_submission",
                "view": {"callback_id": "impri_edit", "private_metadata": "[1]"},
            },
            400,
            "view.private_metadata",
        ),
        (
            {
                "type": "view_submission",
                "user": {"id": "U0RITA"},
                "view": {
                    "callback_id": "impri_edit",
                    "private_metadata": json.dumps({"a": "act_gone", "s": "0" * 64, "c": CHANNEL}),
                    "state": {"values": ["not", "an", "object"]},
                },
            },
            200,
            None,
        ),
        ([1, 2], 400, "payload"),
        ({"type": "shortcut", "callback_id": "x"}, 200, None),
    ],
)
def test_a_signed_but_malformed_payload_is_a_4xx_naming_the_field_never_a_500(
    team, slack, payload, status, field
):
    answer = post(payload)
    assert answer.status_code == status
    if field:
        assert answer.json()["detail"].startswith(field)
    assert slack.to("chat.postEphemeral") == []


def test_a_payload_that_is_not_json_is_refused(team, slack):
    body = "payload=%7Bnot-json"
    answer = Client().post(
        URL, body, content_type="application/x-www-form-urlencoded", headers=sign(SECRET, body)
    )
    assert answer.status_code == 400 and answer.json()["detail"].startswith("payload")


def test_slack_unreachable_during_a_click_decides_nothing_and_answers(agent, team, slack, settings):
    from tests.live import free_port

    action = make_action(agent.agent)
    settings.IMPRI_SLACK_API_URL = f"http://127.0.0.1:{free_port()}/api/"  # nobody listens
    assert click(action, "approve").status_code == 200
    assert click(action, "edit").status_code == 200
    assert Action.objects.get(pk=action.pk).status == ActionStatus.PENDING


def test_edit_on_a_settled_action_says_too_late_and_opens_nothing(agent, team, slack):
    action = make_action(agent.agent)
    services.decide(action.pk, by=team, verdict="reject")
    assert click(action, "edit").status_code == 200
    assert slack.to("views.open") == []
    assert "Too late: this action is already rejected by rita" in ephemeral_text(slack)
