"""Notifications to reviewer groups: email through Django's locmem backend, Slack to a local receiver.

Every message links to the action's page and to nothing that acts on a GET;
text from the agent is untrusted (plain-text email, one-line subjects, Slack's
control characters escaped). Retries are driven with time_machine.
"""

from __future__ import annotations

import json
import re
from datetime import timedelta

import pytest
import time_machine
from django.contrib.auth.models import Group, User
from django.core import mail
from django.utils import timezone

from approvals import services
from approvals.models import Action, Agent, GroupNotificationSettings, Notification
from approvals.presenters import inbox_url
from delivery import notices
from tests.conftest import make_agent
from tests.delivery.test_webhooks import Receiver
from tests.factories import make_action
from tests.live import free_port
from tests.threads import run_together

BASE = "https://impri.example.com"
URL_RE = re.compile(r"https?://[^\s<>|]+")


@pytest.fixture(autouse=True)
def loopback_receivers_allowed(settings):
    """The Slack receivers here listen on 127.0.0.1: allow exactly that, as an operator would."""
    settings.IMPRI_CALLBACK_ALLOWED_NETWORKS = ["127.0.0.1/32"]


@pytest.fixture(autouse=True)
def _base_url(settings):
    settings.IMPRI_BASE_URL = BASE


@pytest.fixture
def slack():
    made: list[Receiver] = []

    def make(**kwargs) -> Receiver:
        receiver = Receiver(**kwargs)
        made.append(receiver)
        return receiver

    yield make
    for receiver in made:
        receiver.close()


@pytest.fixture
def team(db):
    """The default review group: two members with addresses, one without, one inactive."""
    group, _ = Group.objects.get_or_create(name="reviewers")
    for name, email, active in [
        ("rita", "rita@example.com", True),
        ("sam", "", True),
        ("olga", "olga@example.com", False),
        ("lee", "Lee@Example.com", True),
    ]:
        user = User.objects.create_user(name, email=email, is_active=active)
        user.groups.add(group)
    return group


def notification(action: Action, kind="new", channel="email", group=None) -> Notification:
    """An outbox row written directly (the services write their own; those are cleared here)."""
    Notification.objects.filter(action=action).delete()
    return Notification.objects.create(
        action=action, group=group or action.review_group, kind=kind, channel=channel
    )


def configure(group, **fields) -> GroupNotificationSettings:
    config, _ = GroupNotificationSettings.objects.update_or_create(group=group, defaults=fields)
    return config


def urls_in(text: str) -> list[str]:
    return URL_RE.findall(text)


# --- Email --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("members", "config", "channels"),
    [
        ("with addresses", None, ["email"]),
        ("without addresses", None, []),
        ("only an inactive one with an address", None, []),
        ("without addresses", {"extra_emails": ["leads@example.com"]}, ["email"]),
        ("without addresses", {"extra_emails": []}, []),
        ("with addresses", {"email_enabled": False}, []),
        (
            "with addresses",
            {"email_enabled": False, "slack_webhook_url": "https://hooks.example.com/x"},
            ["slack"],
        ),
        (
            "with addresses",
            {"slack_webhook_url": "https://hooks.example.com/x"},
            ["email", "slack"],
        ),
    ],
)
def test_a_push_to_the_queue_writes_one_row_per_channel_the_group_has_on(
    agent, team, members, config, channels
):
    if members == "without addresses":
        User.objects.filter(groups=team).update(email="")
    elif members == "only an inactive one with an address":
        User.objects.filter(groups=team, is_active=True).update(email="")
    if config is not None:
        configure(team, **config)
    Group.objects.create(name="other-team")  # another group's settings must not count
    configure(Group.objects.get(name="other-team"), slack_webhook_url="https://hooks.example.com/o")

    action = make_action(agent.agent)

    made = Notification.objects.filter(action=action, kind="new")
    assert sorted(made.values_list("channel", flat=True)) == channels
    assert all(note.group_id == team.pk for note in made)


def test_an_email_reaches_the_groups_members_with_a_link_to_the_action_page(agent, team):
    configure(team, extra_emails=["support-leads@example.com", "lee@example.com"])
    action = make_action(agent.agent)
    note = notification(action)
    mail.outbox.clear()

    assert notices.send_due() == 1

    [message] = mail.outbox
    link = inbox_url(action, BASE)
    assert link == f"{BASE}/inbox/actions/{action.pk}"
    assert message.to == ["rita@example.com", "Lee@example.com", "support-leads@example.com"]
    assert message.subject == "[Impri] Review needed: Refund $84.00 on order 10432 ($84.00 USD)"
    body = message.body
    assert "A new action is waiting for review by reviewers." in body
    assert "Agent:   support-bot" in body
    assert "Amount:  $84.00 USD" in body
    assert "Kind:    payment.refund" in body
    # The only link is the action's page: nothing a mail scanner could approve with a GET.
    assert urls_in(body) == [link]
    assert "/decide" not in body and "approve?" not in body
    assert message.alternatives == [] and message.content_subtype == "plain"

    note.refresh_from_db()
    assert note.delivered_at is not None and note.attempts == 1 and note.last_error == ""
    # Idempotent: a second sweep sends nothing.
    assert notices.send_due() == 0
    assert len(mail.outbox) == 1


def test_an_agent_cannot_inject_headers_or_markup_into_the_email(agent, team):
    action = make_action(agent.agent)
    Action.objects.filter(pk=action.pk).update(
        title="Refund\r\nBcc: attacker@evil.example\r\n\r\n<b>approve</b>"
    )
    action.refresh_from_db()
    notification(action)
    mail.outbox.clear()

    assert notices.send_due() == 1

    [message] = mail.outbox
    assert "\n" not in message.subject and "\r" not in message.subject
    assert "Refund Bcc: attacker@evil.example <b>approve</b>" in message.subject
    assert message.bcc == []
    rendered = message.message()
    assert rendered["Bcc"] is None
    assert rendered["To"] == "rita@example.com, Lee@example.com"
    assert message.alternatives == []  # plain text: the markup stays inert text
    assert "Title:   Refund Bcc: attacker@evil.example <b>approve</b>" in message.body


@pytest.mark.parametrize(
    ("kind", "subject", "says"),
    [
        ("escalated", "Escalated to you", "has been escalated to reviewers"),
        ("reminder", "Still waiting for review", "is still waiting for review by reviewers"),
    ],
)
def test_escalation_and_reminder_emails_say_what_happened(agent, team, kind, subject, says):
    action = make_action(agent.agent)
    notification(action, kind=kind)
    mail.outbox.clear()
    assert notices.send_due() == 1
    [message] = mail.outbox
    assert message.subject.startswith(f"[Impri] {subject}: Refund $84.00")
    assert says in message.body
    assert "Expires:" in message.body


def test_a_stale_approval_email_asks_for_the_missing_result(agent, team):
    action = make_action(agent.agent)
    rita = User.objects.get(username="rita")
    services.decide(action.pk, by=rita, verdict="approve")
    notification(action, kind="stale")
    mail.outbox.clear()

    assert notices.send_due() == 1

    [message] = mail.outbox
    assert message.subject.startswith("[Impri] Approved, but no result reported: Refund")
    assert "was approved at" in message.body
    assert "has not reported" in message.body
    assert urls_in(message.body) == [inbox_url(action, BASE)]


def test_a_payload_without_money_leaves_the_amount_out(agent, team):
    action = make_action(
        agent.agent,
        kind="email.send",
        title="Email the customer",
        payload={"to": "a@b.c"},
        editable=[],
    )
    notification(action)
    mail.outbox.clear()
    notices.send_due()
    [message] = mail.outbox
    assert message.subject == "[Impri] Review needed: Email the customer"
    assert "Amount" not in message.body


def test_a_failing_mail_server_is_retried_with_backoff_then_delivered(agent, team, settings):
    action = make_action(agent.agent)
    note = notification(action)
    mail.outbox.clear()
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT, settings.EMAIL_TIMEOUT = "127.0.0.1", free_port(), 5
    with time_machine.travel(timezone.now(), tick=False) as traveller:
        assert notices.send_due() == 1
        note.refresh_from_db()
        assert note.delivered_at is None and note.gave_up_at is None
        assert "ConnectionRefusedError" in note.last_error
        assert note.attempts == 1
        assert note.next_attempt_at > timezone.now()
        assert notices.send_due() == 0  # not due yet

        settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
        traveller.move_to(note.next_attempt_at)
        assert notices.send_due() == 1
    note.refresh_from_db()
    assert note.delivered_at is not None and note.attempts == 2 and note.last_error == ""
    assert len(mail.outbox) == 1


def test_a_dead_mail_server_is_tried_once_per_sweep(agent, team, settings):
    notes = [notification(make_action(agent.agent)) for _ in range(3)]
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", free_port()
    assert notices.send_due() == 1
    assert sorted(Notification.objects.get(pk=n.pk).attempts for n in notes) == [0, 0, 1]


@pytest.mark.parametrize(
    ("setup", "reason"),
    [
        ("email_off", "email is turned off"),
        ("nobody", "nobody in reviewers has an email address"),
        ("decided", "the action is approved now"),
        ("expired", "the action is expired now"),
        ("moved", "the action has moved to another group"),
    ],
)
def test_notifications_with_nothing_to_say_are_closed_with_the_reason(agent, team, setup, reason):
    action = make_action(agent.agent)
    if setup == "email_off":
        configure(team, email_enabled=False, extra_emails=["x@example.com"])
    elif setup == "nobody":
        User.objects.filter(groups=team).update(email="")
    elif setup == "decided":
        services.decide(action.pk, by=User.objects.get(username="rita"), verdict="approve")
    elif setup == "expired":
        Action.objects.filter(pk=action.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    elif setup == "moved":
        Action.objects.filter(pk=action.pk).update(
            review_group=Group.objects.create(name="support-leads")
        )
    note = notification(action, group=team)
    mail.outbox.clear()

    assert notices.send_due() == 1

    assert mail.outbox == []
    note.refresh_from_db()
    assert note.gave_up_at is not None and note.delivered_at is None
    assert note.last_error.startswith("skipped: ") and reason in note.last_error
    assert notices.send_due() == 0


def test_a_stale_notice_is_dropped_once_the_agent_reported(agent, team):
    action = make_action(agent.agent)
    services.decide(action.pk, by=User.objects.get(username="rita"), verdict="approve")
    services.report_result(action.pk, agent=agent.agent, status="executed")
    note = notification(action, kind="stale")
    mail.outbox.clear()
    notices.send_due()
    assert mail.outbox == []
    note.refresh_from_db()
    assert "reported a result" in note.last_error


@pytest.mark.django_db(transaction=True)
def test_concurrent_sweeps_send_each_email_once(agent, team):
    notes = [notification(make_action(agent.agent)) for _ in range(12)]
    mail.outbox.clear()

    attempted = run_together([notices.send_due] * 4)

    assert sum(attempted) == 12
    assert len(mail.outbox) == 12
    assert (
        Notification.objects.filter(pk__in=[n.pk for n in notes], attempts=1)
        .exclude(delivered_at=None)
        .count()
        == 12
    )


# --- Slack --------------------------------------------------------------------------


def test_slack_gets_the_title_amount_agent_and_a_link(agent, team, slack):
    receiver = slack()
    configure(team, slack_webhook_url=receiver.url)
    action = make_action(agent.agent)
    note = notification(action, channel="slack")

    assert notices.send_due() == 1

    [got] = receiver.requests
    assert got.headers["content-type"] == "application/json"
    message = got.json
    link = inbox_url(action, BASE)
    assert message["text"] == (
        "Review needed: Refund $84.00 on order 10432 · $84.00 USD · agent support-bot "
        f"<{link}|Open in Impri>"
    )
    head, facts, context = message["blocks"]
    assert head["text"] == {
        "type": "mrkdwn",
        "text": f"*Review needed*\n<{link}|Refund $84.00 on order 10432>",
    }
    assert [f["text"] for f in facts["fields"]] == [
        "*Amount*\n$84.00 USD",
        "*Agent*\nsupport-bot",
        "*Kind*\npayment.refund",
        "*Group*\nreviewers",
    ]
    assert "no approve button" in context["elements"][0]["text"]
    links = re.findall(r"<([^>]*)>", json.dumps(message))
    assert links and all(inner.startswith(link + "|") for inner in links)
    note.refresh_from_db()
    assert note.delivered_at is not None
    assert mail.outbox == []  # this row was the Slack channel only


def test_slack_text_from_the_agent_is_escaped(db, team, slack):
    receiver = slack()
    configure(team, slack_webhook_url=receiver.url)
    sneaky = make_agent("sneaky-bot")  # renamed as agents could be before names were slugs
    Agent.objects.filter(pk=sneaky.agent.pk).update(name="<!channel> & friends")
    sneaky.agent.refresh_from_db()
    action = make_action(sneaky.agent)
    Action.objects.filter(pk=action.pk).update(
        title="Refund <http://evil.example/approve|Approve now> <!here> & more",
        payload={"amount_cents": 8400, "currency": "<@U123>"},
    )
    action.refresh_from_db()
    notification(action, channel="slack")

    assert notices.send_due() == 1

    sent = receiver.requests[0].body.decode()
    link = inbox_url(action, BASE)
    message = json.loads(sent)
    everything = json.dumps(message, ensure_ascii=False)
    for raw in ("<!channel>", "<!here>", "<http://evil", "<@U123>"):
        assert raw not in everything
    assert "&lt;!channel&gt; &amp; friends" in message["text"]
    assert (
        "Refund &lt;http://evil.example/approve|Approve now&gt; &lt;!here&gt; &amp; more"
        in (message["blocks"][0]["text"]["text"])
    )
    # Every <…> left is one of ours: a link to the action's page.
    assert all(inner.startswith(link + "|") for inner in re.findall(r"<([^>]*)>", everything))


def test_a_failing_slack_webhook_is_retried_until_it_takes_the_message(agent, team, slack):
    receiver = slack(fail_first=2, fail_status=500)
    configure(team, slack_webhook_url=receiver.url)
    note = notification(make_action(agent.agent), channel="slack")
    with time_machine.travel(timezone.now(), tick=False) as traveller:
        for _ in range(2):
            assert notices.send_due() == 1
            note.refresh_from_db()
            assert note.last_error.startswith("HTTP 500")
            assert notices.send_due() == 0
            traveller.move_to(note.next_attempt_at)
        assert notices.send_due() == 1
    note.refresh_from_db()
    assert note.delivered_at is not None and note.attempts == 3
    assert len(receiver.requests) == 3
    assert len({r.body for r in receiver.requests}) == 1


def test_a_dead_slack_webhook_is_given_up_after_a_day(agent, team, slack):
    receiver = slack(fail_first=10_000, fail_status=404)
    configure(team, slack_webhook_url=receiver.url)
    note = notification(make_action(agent.agent, expires_in_s=3 * 86400), channel="slack")
    with time_machine.travel(timezone.now(), tick=False) as traveller:
        for _ in range(100):
            assert notices.send_due() == 1
            note.refresh_from_db()
            if note.gave_up_at:
                break
            traveller.move_to(note.next_attempt_at)
    assert note.gave_up_at == note.created_at + timedelta(days=1)
    assert note.attempts == len(receiver.requests)
    assert note.last_error.startswith("HTTP 404")


def test_no_slack_url_means_the_slack_row_is_closed_not_retried(agent, team):
    note = notification(make_action(agent.agent), channel="slack")
    assert notices.send_due() == 1
    note.refresh_from_db()
    assert note.gave_up_at is not None and "has no Slack webhook URL" in note.last_error


# --- Admin --------------------------------------------------------------------------


def test_admin_edits_group_settings_and_lists_notifications(admin_client, agent, team, hosts):
    hosts["hooks.slack.com"] = ["93.184.215.14"]  # a public address, never contacted here
    page = admin_client.post(
        "/admin/approvals/groupnotificationsettings/add/",
        {
            "group": team.pk,
            "email_enabled": "on",
            "extra_emails": '["not an address"]',
            "slack_webhook_url": "",
            "reminder_every_s": "",
        },
    )
    assert page.status_code == 200 and "Enter a valid email address" in page.content.decode()
    page = admin_client.post(
        "/admin/approvals/groupnotificationsettings/add/",
        {
            "group": team.pk,
            "email_enabled": "on",
            "extra_emails": '["leads@example.com"]',
            "slack_webhook_url": "https://hooks.slack.com/services/T0/B0/x",
            "reminder_every_s": "3600",
        },
    )
    assert page.status_code == 302
    config = GroupNotificationSettings.objects.get(group=team)
    assert config.extra_emails == ["leads@example.com"]
    assert config.reminder_every_s == 3600

    note = notification(make_action(agent.agent))
    listing = admin_client.get("/admin/approvals/notification/")
    assert listing.status_code == 200
    assert f"/admin/approvals/notification/{note.pk}/change/" in listing.content.decode()
    assert admin_client.get("/admin/approvals/notification/add/").status_code == 403


def test_without_a_base_url_emails_link_where_serve_listens(agent, team, settings):
    settings.IMPRI_BASE_URL = ""
    settings.IMPRI_HOST, settings.IMPRI_PORT = "127.0.0.1", 8123
    configure(team)
    action = make_action(agent.agent)
    notification(action)
    mail.outbox.clear()
    assert notices.send_due() == 1
    assert urls_in(mail.outbox[0].body) == [f"http://127.0.0.1:8123/inbox/actions/{action.pk}"]
