"""Telling waiters that an action changed: channel-layer groups, after commit.

Messages are hints, never the truth: a waiter always re-reads the row. So a
message lost to a full channel, a Redis hiccup or a cancelled receive costs at
most one re-read interval, never a wrong answer.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

logger = logging.getLogger(__name__)

LAYER_CALL_TIMEOUT_S = 2.0


def action_group(action_id: str) -> str:
    return f"action.{action_id}"


# Reviewers' inboxes listen per review group; superusers see every group.
INBOX_ALL_GROUP = "inbox.all"


def inbox_group(review_group_id: int | None) -> str:
    return f"inbox.group.{review_group_id}" if review_group_id else "inbox.unrouted"


def publish_on_commit(action, event: str, *, also_review_group_ids=()) -> None:
    """After commit, tell the action's waiters and the inboxes that can see it.

    ``also_review_group_ids`` names groups that could see the action before this
    change (an escalation moves it), so their open queues drop it too.
    """
    message = {
        "type": "action.update",
        "action_id": action.pk,
        "status": action.status,
        "event": event,
    }
    inbox_message = inbox_update(action, event)
    group_ids = {action.review_group_id, *also_review_group_ids}
    groups = [inbox_group(pk) for pk in sorted(group_ids, key=str)] + [INBOX_ALL_GROUP]

    def send() -> None:
        publish(action_group(action.pk), message)
        for group in groups:
            publish(group, inbox_message)

    transaction.on_commit(send)


def inbox_update(action, event: str) -> dict:
    """What an open inbox needs to place, refresh or remove a row without asking first.

    Built before commit from the object the service already holds (it reads no
    row the service did not load), so publishing costs no query after commit.
    """
    return {
        "type": "inbox.update",
        "action_id": action.pk,
        "status": action.status,
        "event": event,
        "review_group_id": action.review_group_id,
        "created_at": action.created_at.isoformat(),
        "expires_at": action.expires_at.isoformat(),
        "decided_at": action.decided_at.isoformat() if action.decided_at else None,
        "decided_by": _decided_by(action),
    }


def _decided_by(action) -> dict | None:
    try:
        return action.decided_by
    except Exception:
        # A partially loaded object must never stop the publish; the inbox re-reads on demand.
        logger.warning("could not name who decided %s", action.pk, exc_info=True)
        return None


def publish(group: str, message: dict) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(group, message)
    except Exception:
        # The change is committed; waiters will see it on their next re-read.
        logger.warning("could not publish %s to %s", message.get("event"), group, exc_info=True)


class Listener:
    """Waits for a message on one channel, or degrades to a plain timer."""

    def __init__(self, layer, channel: str | None):
        self.layer = layer
        self.channel = channel

    @property
    def connected(self) -> bool:
        return self.channel is not None

    async def wait(self, seconds: float) -> bool:
        """Return True when a message arrived, False when ``seconds`` passed."""
        if self.channel is None:
            await asyncio.sleep(seconds)
            return False
        try:
            await asyncio.wait_for(self.layer.receive(self.channel), seconds)
            return True
        except TimeoutError:
            return False
        except Exception:
            logger.warning(
                "channel layer receive failed; falling back to re-reading the row", exc_info=True
            )
            self.channel = None
            return False


@asynccontextmanager
async def action_listener(action_id: str) -> AsyncIterator[Listener]:
    layer = get_channel_layer()
    group = action_group(action_id)
    channel = None
    if layer is not None:
        try:
            channel = await asyncio.wait_for(layer.new_channel(), LAYER_CALL_TIMEOUT_S)
            await asyncio.wait_for(layer.group_add(group, channel), LAYER_CALL_TIMEOUT_S)
        except Exception:
            logger.warning(
                "channel layer unreachable; waiting on %s by re-reading the row",
                group,
                exc_info=True,
            )
            channel = None
    try:
        yield Listener(layer, channel)
    finally:
        if channel is not None:
            try:
                # Shielded: a caller cancelled through an anyio cancel scope (the MCP SDK)
                # would cancel the discard too and leave the channel in the group.
                await asyncio.shield(
                    asyncio.wait_for(layer.group_discard(group, channel), LAYER_CALL_TIMEOUT_S)
                )
            except Exception:
                logger.warning("could not leave %s", group, exc_info=True)
