"""Posting and updating the Slack app's messages: an outbox like ``delivery.notices``.

Every change to an action reaches :func:`on_action_changed` inside its
transaction (``approvals.events.action_changed``). An action that arrives in a
group with a Slack channel (pushed for review, escalated) gets a
``SlackMessage`` row; any later change (a review, the decision from anywhere,
expiry, cancel, a result) makes its rows due again. :func:`send_due` sends what
is due on a lane of its own (``delivery.lanes``), with the outbox's lease,
backoff and give-up: the first send posts (``chat.postMessage``), later ones
update in place (``chat.update``) to what the action is now, so a settled
action's buttons disappear and the message says who decided what.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from django.conf import settings
from django.db import connection
from django.db.models import F
from django.utils import timezone
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from approvals import outbox
from approvals.models import ActionStatus
from delivery import lanes, webhooks

from . import blocks
from .models import SlackChannel, SlackMessage

logger = logging.getLogger(__name__)

LANE = lanes.Lane("slack", "Impri-Slack/1")
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
    return WebClient(
        token=token,
        base_url=settings.IMPRI_SLACK_API_URL,
        timeout=timeout or webhooks.request_timeout_s(),
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


class Skip(Exception):
    """Nothing can be sent for this row; closed as given up, with the reason."""


def send_due(now: datetime | None = None, limit: int = 50, background: bool = False) -> int:
    """Post or update the messages that are due (at most ``limit``); see ``notify.send_due``."""
    read_clock = webhooks.clock(now)

    def read(claimed: list, n: int) -> list:
        rows = (
            SlackMessage.objects.due(read_clock())
            .exclude(pk__in=claimed)
            .order_by("next_attempt_at", "pk")
            .values_list("pk", "channel")[:n]
        )
        return [(pk, (f"slack:{channel}",)) for pk, channel in rows]

    def send(pk: int, in_background: bool) -> str:
        return send_one(pk, read_clock, connection.close if in_background else None)

    return LANE.sweep(read, send, limit=limit, background=background)


def send_one(pk: int, read_clock: Callable[[], datetime], release=None) -> str:
    """Lease one row, then post or update its message; an outcome from ``delivery.webhooks``."""
    lease_until = webhooks.take_lease(SlackMessage, pk, read_clock())
    if lease_until is None:
        return webhooks.BUSY
    row = SlackMessage.objects.select_related(
        "action__agent", "action__review_group", "action__decided_by_user"
    ).get(pk=pk)
    revision = row.revision
    try:
        client = web_client()
        if client is None:
            raise Skip("IMPRI_SLACK_BOT_TOKEN is not set")
        action = row.action
        live = action.effective_status == ActionStatus.PENDING
        fallback, content = blocks.message(action, row.group_id)
        if release is not None:
            release()  # the network call holds no database connection
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
            SlackMessage.objects.filter(pk=pk).update(
                ts=answer["ts"], channel=answer.get("channel") or row.channel
            )
        # else: settled (or moved on) before it was ever posted: nothing to show.
    except Skip as skip:
        return _give_up(pk, lease_until, str(skip), read_clock())
    except SlackApiError as exc:
        error = str(exc.response.get("error") or exc)
        if error in PERMANENT:
            return _give_up(pk, lease_until, f"Slack answered {error}", read_clock())
        return _failed(row, lease_until, f"Slack answered {error}", read_clock())
    except Exception as exc:  # a failed send is retried with backoff, whatever broke
        no_answer = isinstance(exc, OSError)  # refused, timed out (urllib's URLError is one)
        return _failed(row, lease_until, webhooks.describe(exc), read_clock(), no_answer)
    done = SlackMessage.objects.filter(pk=pk, revision=revision, locked_until=lease_until).update(
        delivered_at=read_clock(), locked_until=None, last_error=""
    )
    if not done:  # the action changed while we sent: due again, with what it is now
        SlackMessage.objects.filter(pk=pk, locked_until=lease_until).update(locked_until=None)
    return webhooks.SENT


def _give_up(pk: int, lease_until: datetime, why: str, at: datetime) -> str:
    SlackMessage.objects.filter(pk=pk, locked_until=lease_until).update(
        last_error=f"skipped: {why}", locked_until=None, gave_up_at=at
    )
    logger.warning("slack message %s given up: %s", pk, why)
    return webhooks.FAILED


def _failed(row, lease_until, error: str, at: datetime, unreachable: bool = False) -> str:
    gave_up = webhooks.record_failure(
        SlackMessage, row.pk, lease_until, row.created_at, row.attempts, error, at
    )
    (logger.error if gave_up else logger.warning)(
        "slack message %s (%s) failed: %s", row.pk, row.action_id, error
    )
    return webhooks.UNREACHABLE if unreachable else webhooks.FAILED


def send_in_background() -> int:
    """A background sweep: what the ticker, the Celery task and the lane itself run."""
    if not settings.IMPRI_SLACK_BOT_TOKEN:
        return 0
    return send_due(background=True)


LANE.sweeper = send_in_background
