"""Tell reviewer groups about their queue: the sending side of the ``Notification`` outbox.

The services write ``Notification`` rows (one per channel) when an action
reaches a group, is escalated to it, is still undecided at reminder time, or was
approved and never reported. Its outbox (``OUTBOX``) sends what is due, with the
same lease, retry and give-up rules as webhooks (``delivery.outboxes``), on a lane
of its own: the mail server and each group's Slack hook are destinations, so one
that does not answer holds up nobody else.

Every message links to the action's page in the inbox and never to anything
that acts on a GET: mail scanners and link unfurlers open links, and silence
or a scanner must never count as consent. Text from the agent (title, kind,
agent name, currency) is untrusted: emails are plain text only, subjects are
one line. E-mail is sent here; the Slack message (its control characters
escaped) is the Slack app's, a sender it adds for its channel (``SENDERS``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime

import httpx
from django.conf import settings
from django.core.mail import get_connection, send_mail

from approvals import money as action_money
from approvals.models import Action, ActionStatus, GroupNotificationSettings, Notification
from approvals.presenters import inbox_url
from delivery import lanes

from . import sending
from .outboxes import Attempt, Outbox, Skip

SUBJECT_PREFIX = "[Impri] "

HEADLINES = {
    Notification.Kind.NEW: "Review needed",
    Notification.Kind.ESCALATED: "Escalated to you",
    Notification.Kind.REMINDER: "Still waiting for review",
    Notification.Kind.STALE: "Approved, but no result reported",
}
# Kinds about an action that should still be waiting for this group.
WAITING_KINDS = (Notification.Kind.NEW, Notification.Kind.ESCALATED, Notification.Kind.REMINDER)
# A stale notice is moot once the agent reported.
REPORTED = (ActionStatus.EXECUTED, ActionStatus.FAILED)


def read(due, n: int) -> list:
    """Email goes through one mail server; each group has its own Slack hook."""
    rows = due.values_list("pk", "channel", "group_id")[:n]
    return [
        (pk, ("email" if channel == Notification.Channel.EMAIL else f"{channel}:{group_id}",))
        for pk, channel, group_id in rows
    ]


def load(pk: int) -> Notification:
    return Notification.objects.select_related("action__agent", "group").get(pk=pk)


def send(note: Notification, attempt: Attempt) -> None:
    check_still_relevant(note)
    group_settings(note)  # read now, before the connection goes back
    attempt.release()
    sender = SENDERS.get(note.channel)
    if sender is None:
        raise Skip(f"unknown channel {note.channel!r}")
    sender(attempt.client, note)


def check_still_relevant(note: Notification) -> None:
    action = note.action
    if note.kind in WAITING_KINDS:
        if action.effective_status != ActionStatus.PENDING:
            raise Skip(f"the action is {action.effective_status} now")
        if action.review_group_id != note.group_id:
            raise Skip("the action has moved to another group")
    elif note.kind == Notification.Kind.STALE and action.status in REPORTED:
        raise Skip("the agent has reported a result since")


def group_settings(note: Notification) -> GroupNotificationSettings:
    try:
        return note.group.notification_settings
    except GroupNotificationSettings.DoesNotExist:
        return GroupNotificationSettings(group=note.group)


# --- What a message says ----------------------------------------------------------


def one_line(text: str, limit: int = 200) -> str:
    """Untrusted text fit for a header or a field: no line breaks or control characters."""
    text = re.sub(r"[\x00-\x1f\x7f\u2028\u2029]+", " ", str(text))
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def amount_text(action: Action) -> str:
    money = action_money.primary(action)
    return one_line(str(money), 60) if money else ""


def when(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M UTC") if value else "—"


def situation(note: Notification) -> str:
    action, group = note.action, one_line(note.group.name)
    if note.kind == Notification.Kind.NEW:
        return f"A new action is waiting for review by {group}."
    if note.kind == Notification.Kind.ESCALATED:
        return f"An undecided action has been escalated to {group}."
    if note.kind == Notification.Kind.REMINDER:
        return (
            f"This action is still waiting for review by {group} (since {when(action.created_at)})."
        )
    return (
        f"This action was approved at {when(action.decided_at)}, but the agent has not "
        "reported whether it was carried out. Check with the agent's owner."
    )


def facts(note: Notification) -> list[tuple[str, str]]:
    action = note.action
    rows = [("Title", one_line(action.title)), ("Kind", one_line(action.kind, 100))]
    amount = amount_text(action)
    if amount:
        rows.append(("Amount", amount))
    rows.append(("Agent", one_line(action.agent.name, 100)))
    rows.append(("Group", one_line(note.group.name, 150)))
    if note.kind in WAITING_KINDS:
        rows.append(("Expires", f"{when(action.expires_at)} (unanswered, it expires unapproved)"))
    return rows


# --- Email ------------------------------------------------------------------------


def recipients(note: Notification, prefs: GroupNotificationSettings) -> list[str]:
    members = note.group.user_set.filter(is_active=True).exclude(email="").order_by("pk")
    addresses = [user.email for user in members] + [
        e for e in (prefs.extra_emails or []) if isinstance(e, str)
    ]
    seen, unique = set(), []
    for address in (a.strip() for a in addresses):
        if address and address.lower() not in seen:
            seen.add(address.lower())
            unique.append(address)
    return unique


def email_subject(note: Notification) -> str:
    action = note.action
    amount = amount_text(action)
    subject = f"{SUBJECT_PREFIX}{HEADLINES[note.kind]}: {one_line(action.title, 150)}"
    return one_line(f"{subject} ({amount})" if amount else subject, 250)


def email_body(note: Notification) -> str:
    link = inbox_url(note.action)
    width = max(len(label) for label, _ in facts(note)) + 2
    lines = [situation(note), ""]
    lines += [f"{label + ':':<{width}}{value}" for label, value in facts(note)]
    lines += [
        "",
        "Open it in Impri to review (you will be asked to sign in):",
        link,
        "",
        "This email has no approve or reject link on purpose: decide on the action's page.",
    ]
    return "\n".join(lines) + "\n"


def send_email(note: Notification) -> None:
    prefs = group_settings(note)
    if not prefs.email_enabled:
        raise Skip(f"email is turned off for {note.group}")
    to = recipients(note, prefs)
    if not to:
        raise Skip(f"nobody in {note.group} has an email address and there are no extra emails")
    # Django's SMTP backend waits forever by default; a sweep must not.
    timeout = settings.EMAIL_TIMEOUT or sending.request_timeout_s()
    send_mail(
        email_subject(note),
        email_body(note),
        None,
        to,
        fail_silently=False,
        connection=get_connection(timeout=timeout),
    )


# How a notice goes out, by channel: e-mail here; Slack's incoming webhook is the Slack
# app's (slackapp/notices.py), added in its AppConfig.ready.
SENDERS: dict[str, Callable[[httpx.Client, Notification], None]] = {
    Notification.Channel.EMAIL: lambda client, note: send_email(note),
}


def add_channel(channel: str, sender: Callable[[httpx.Client, Notification], None]) -> None:
    SENDERS[channel] = sender


OUTBOX = Outbox(
    name="notifications",
    model=Notification,
    lane=lanes.Lane("notifications", sending.USER_AGENT),
    read=read,
    load=load,
    send=send,
    # No answer from the mail server or the hook: leave its other messages for next time.
    no_answer=(OSError, httpx.TransportError),
    pruned_as="notifications",
    listed_when_none=True,
)
LANE = OUTBOX.lane
send_due = OUTBOX.send_due
send_in_background = OUTBOX.send_in_background
