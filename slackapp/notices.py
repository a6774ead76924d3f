"""A group's Slack notices through its incoming webhook: the ``slack`` channel of notices.

A group with a Slack incoming-webhook URL (``GroupNotificationSettings``) hears
about its queue in its channel: a message that links to the action's page and
never acts itself (no buttons: a link unfurler or silence must never count as
consent). Delivery sends the ``Notification`` rows (``delivery.notices``); this
app says how one goes to Slack and registers it as the channel's sender, so all
of Impri's Slack, this and the Slack app's interactive messages, lives here.
"""

from __future__ import annotations

import httpx

from approvals.models import Notification
from approvals.presenters import inbox_url
from delivery import notices, sending
from delivery.notices import amount_text, one_line
from delivery.outboxes import Failed, Skip
from plumbing import outbound


def slack_escape(text: str) -> str:
    """Slack's three control characters; stops links, mentions (<!channel>) and fake markup."""
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def message(note: Notification) -> dict:
    action = note.action
    link = inbox_url(action)
    headline = notices.HEADLINES[note.kind]
    title = slack_escape(one_line(action.title))
    agent = slack_escape(one_line(action.agent.name, 100))
    amount = slack_escape(amount_text(action))
    fields = [f"*Agent*\n{agent}", f"*Kind*\n{slack_escape(one_line(action.kind, 100))}"]
    if amount:
        fields.insert(0, f"*Amount*\n{amount}")
    fields.append(f"*Group*\n{slack_escape(one_line(note.group.name, 150))}")
    summary = " · ".join(p for p in (title, amount, f"agent {agent}") if p)
    return {
        "text": f"{headline}: {summary} <{link}|Open in Impri>",
        "blocks": [
            {
                "type": "section",
                "text": {"type": "mrkdwn", "text": f"*{headline}*\n<{link}|{title}>"},
            },
            {
                "type": "section",
                "fields": [{"type": "mrkdwn", "text": f} for f in fields],
            },
            {
                "type": "context",
                "elements": [
                    {
                        "type": "mrkdwn",
                        "text": f"{slack_escape(notices.situation(note))} "
                        f"<{link}|Decide in Impri>; there is no approve button here on purpose.",
                    }
                ],
            },
        ],
    }


def send(client: httpx.Client, note: Notification) -> None:
    url = notices.group_settings(note).slack_webhook_url
    if not url:
        raise Skip(f"{note.group} has no Slack webhook URL")
    if not sending.is_http_url(url):
        raise Skip(f"the Slack webhook URL of {note.group} is not an http(s) URL")
    try:
        with client.stream(
            "POST", url, json=message(note), timeout=sending.request_timeout_s()
        ) as response:
            if not 200 <= response.status_code < 300:
                raise Failed(f"HTTP {response.status_code}: {sending.start_of(response)}")
    except outbound.Refused as exc:
        raise Skip(f"refused: {exc}; not sent") from None
