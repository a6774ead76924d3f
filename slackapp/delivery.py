"""Posting and updating the Slack app's messages: an outbox like ``delivery.notices``.

Every change to an action reaches :func:`on_action_changed` inside its
transaction (``approvals.events.action_changed``). An action that arrives in a
group with a Slack channel (pushed for review, escalated) gets a
``SlackMessage`` row; any later change (a review, the decision from anywhere,
expiry, cancel, a result) makes its rows due again. Its outbox (``OUTBOX``, sent
by ``delivery.outboxes``) sends what is due on a lane of its own, with every
outbox's lease, backoff and give-up: the first send posts (``chat.postMessage``), later ones
update in place (``chat.update``) to what the action is now, so a settled
action's buttons disappear and the message says who decided what.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from django.conf import settings
from django.db.models import F
from django.utils import timezone

from approvals import outbox
from approvals.models import ActionStatus
from delivery import lanes, sending
from delivery.outboxes import Attempt, Failed, Outbox, Skip

from .models import SlackChannel, SlackMessage

if TYPE_CHECKING:
    from slack_sdk import WebClient

TASK = "slackapp.tasks.deliver_slack_messages"
# Slack answers these when retrying cannot help: the row is given up, with the reason.
PERMANENT = {
    "channel_not_found",
    "not_in_channel",
    "is_archived",
    "invalid_auth",
    "not_authed",
    "account_inactive",
    "token_revoked",
    "missing_scope",
    "message_not_found",
    "cant_update_message",
    "invalid_blocks",
}
# Calls made while Slack waits for our answer (interactivity) must end well within its 3 s.
INLINE_TIMEOUT_S = 2


def web_client(timeout: float | None = None) -> WebClient | None:
    """The Web API client with the bot token, at ``IMPRI_SLACK_API_URL``; None without a token."""
    token = settings.IMPRI_SLACK_BOT_TOKEN
    if not token:
        return None
    # slack_sdk here, not at the top: this module loads in every process (the app's ready
    # hook connects on_action_changed) and most installations send nothing to Slack.
    # deferred: slack_sdk: an idle worker never loads it (tests/project/test_serve_footprint.py)
    from slack_sdk import WebClient

    return WebClient(
        token=token,
        base_url=settings.IMPRI_SLACK_API_URL,
        timeout=timeout or sending.request_timeout_s(),
        # No retries inside a call: the outbox retries with its own backoff, and a click must
        # be answered within Slack's 3 s (the SDK's default would sleep and try once more).
        retry_handlers=[],
    )


# --- Writing rows, in the change's transaction -----------------------------------------


def on_action_changed(sender, action, event: str, **kwargs) -> None:
    if not settings.IMPRI_SLACK_BOT_TOKEN:
        return
    now = timezone.now()
    touched = 0
    if event != "action.pushed":  # a pushed action has no message yet
        touched = SlackMessage.objects.filter(action_id=action.pk).update(
            revision=F("revision") + 1,
            delivered_at=None,
            gave_up_at=None,
            attempts=0,
            last_error="",
            next_attempt_at=now,
            created_at=now,  # the give-up clock starts again for this change
        )
    if action.status == ActionStatus.PENDING and event in ("action.pushed", "action.escalated"):
        channel = (
            SlackChannel.objects.filter(group_id=action.review_group_id)
            .values_list("channel", flat=True)
            .first()
        )
        if channel:
            _, created = SlackMessage.objects.get_or_create(
                action_id=action.pk, group_id=action.review_group_id, defaults={"channel": channel}
            )
            touched += int(created)
    if touched:
        outbox.kick_on_commit(TASK)


# --- Sending ---------------------------------------------------------------------------


def read(due, n: int) -> list:
    return [(pk, (f"slack:{channel}",)) for pk, channel in due.values_list("pk", "channel")[:n]]


def load(pk: int) -> SlackMessage:
    return SlackMessage.objects.select_related(
        "action__agent", "action__review_group", "action__decided_by_user"
    ).get(pk=pk)


def send(row: SlackMessage, attempt: Attempt) -> None:
    """Post the message (``chat.postMessage``) or update it in place (``chat.update``)."""
    client = web_client()
    if client is None:
        raise Skip("IMPRI_SLACK_BOT_TOKEN is not set")
    # deferred: slack_sdk: loaded by web_client() above, never at start (tests/project/test_serve_footprint.py)
    from slack_sdk.errors import SlackApiError  # loaded by web_client() above

    # deferred: slack_sdk's block models: loaded by the first send (tests/project/test_serve_footprint.py)
    from . import blocks  # slack_sdk's block models: loaded by the first send, like the client

    action = row.action
    live = action.effective_status == ActionStatus.PENDING
    fallback, content = blocks.message(action, row.group_id)
    attempt.release()  # the network call holds no database connection
    try:
        if row.ts:
            client.chat_update(channel=row.channel, ts=row.ts, text=fallback, blocks=content)
        elif live and action.review_group_id == row.group_id:
            answer = client.chat_postMessage(
                channel=row.channel,
                text=fallback,
                blocks=content,
                unfurl_links=False,
                unfurl_media=False,
            )
            SlackMessage.objects.filter(pk=row.pk).update(
                ts=answer["ts"], channel=answer.get("channel") or row.channel
            )
        # else: settled (or moved on) before it was ever posted: nothing to show.
    except SlackApiError as exc:
        error = str(exc.response.get("error") or exc)
        raise (Skip if error in PERMANENT else Failed)(f"Slack answered {error}") from None


def sent(row: SlackMessage, lease_until: datetime, at: datetime) -> None:
    """Delivered, unless the action changed while we sent: then due again, with what it is now."""
    done = SlackMessage.objects.filter(
        pk=row.pk, revision=row.revision, locked_until=lease_until
    ).update(delivered_at=at, locked_until=None, last_error="")
    if not done:
        SlackMessage.objects.filter(pk=row.pk, locked_until=lease_until).update(locked_until=None)


OUTBOX = Outbox(
    name="slack",
    model=SlackMessage,
    lane=lanes.Lane("slack", "Impri-Slack/1"),
    read=read,
    load=load,
    send=send,
    sent=sent,
    no_answer=(OSError,),  # refused, timed out (urllib's URLError is one)
    enabled=lambda: bool(settings.IMPRI_SLACK_BOT_TOKEN),
    # Never pruned: a row is the handle of its message, which a later change updates.
)
LANE = OUTBOX.lane
send_due = OUTBOX.send_due
send_in_background = OUTBOX.send_in_background
