"""The live inbox: /ws/inbox forwards changes in the reviewer's groups to their browser.

The consumer only joins groups and forwards (the messages come from
``approvals.events.publish_on_commit``). It sends hints, never data a
reviewer could not already read: the browser fetches each row or fragment
over HTTP, where the usual permission checks apply.
"""

from __future__ import annotations

import hashlib
import logging

from channels.generic.websocket import AsyncJsonWebsocketConsumer

from approvals import reviewer_claims
from approvals.events import INBOX_ALL_GROUP, inbox_group
from plumbing import strict_json
from plumbing.database import database_sync_to_async
from twofactor import services as twofactor

logger = logging.getLogger(__name__)

# Close codes in the application range (4000-4999), shown to the browser.
NOT_LOGGED_IN = 4401
# The reviewer's session ended or their groups changed: reconnect (and be checked again).
ACCESS_CHANGED = 4403


def user_channel_group(user_pk: int) -> str:
    """Every inbox socket of one user: closed when their groups or account change."""
    return f"inbox.user.{user_pk}"


def session_channel_group(session_key: str) -> str:
    """Every inbox socket of one login session: closed when it logs out."""
    return "inbox.session." + hashlib.sha256(session_key.encode()).hexdigest()[:40]


FORWARDED = (
    "action_id",
    "status",
    "event",
    "created_at",
    "expires_at",
    "decided_at",
    "decided_by",
    "claimed_by",
)
# Action pages one socket may say it shows: their claims are released when it closes.
MAX_WATCHED = 20


@database_sync_to_async
def channel_groups_for(user) -> list[str]:
    if user.is_superuser:
        return [INBOX_ALL_GROUP]
    return [inbox_group(pk) for pk in user.groups.values_list("pk", flat=True)]


@database_sync_to_async
def release_claims(user, action_ids: list[str]) -> int:
    return reviewer_claims.release_all(user, action_ids)


class InboxConsumer(AsyncJsonWebsocketConsumer):
    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated or not user.is_active:
            # Closing before accepting refuses the handshake (HTTP 403).
            await self.close(code=NOT_LOGGED_IN)
            return
        if not await database_sync_to_async(twofactor.session_passes)(
            user, self.scope.get("session")
        ):
            await self.close(code=NOT_LOGGED_IN)  # a password alone: the code page first
            return
        self.joined = await channel_groups_for(user)
        self.joined.append(user_channel_group(user.pk))
        session = self.scope.get("session")
        if session is not None and session.session_key:
            self.joined.append(session_channel_group(session.session_key))
        for group in self.joined:
            await self.channel_layer.group_add(group, self.channel_name)
        await self.accept()
        await self.send_json({"event": "hello", "groups": len(self.joined)})

    async def disconnect(self, code: int) -> None:
        for group in getattr(self, "joined", []):
            await self.channel_layer.group_discard(group, self.channel_name)
        watched = getattr(self, "watched", set())
        if watched:
            # The reviewer left (tab closed, network gone): their "I'm on it" goes with them.
            await release_claims(self.scope["user"], sorted(watched))

    async def receive(self, text_data=None, bytes_data=None, **kwargs) -> None:
        """Anything but a small JSON text frame is dropped without a word (or a traceback)."""
        if text_data is None or len(text_data) > 1024:
            return
        try:
            content = strict_json.loads(text_data)
        except ValueError:
            return
        await self.receive_json(content)

    async def receive_json(self, content, **kwargs) -> None:
        # The socket is one-way; a browser's "ping" gets a "pong" to prove the path is alive.
        if not isinstance(content, dict):
            return
        if content.get("event") == "ping":
            await self.send_json({"event": "pong"})
        elif content.get("event") == "watch" and isinstance(content.get("action_id"), str):
            # An action page says which action it shows. It grants nothing: on close, only
            # this user's own claim on it is released.
            watched = self.__dict__.setdefault("watched", set())
            if len(watched) < MAX_WATCHED:
                watched.add(content["action_id"][:40])

    async def inbox_close(self, message: dict) -> None:
        """Logout or a change of groups: no hint may reach this socket any more."""
        for group in getattr(self, "joined", []):
            await self.channel_layer.group_discard(group, self.channel_name)
        self.joined = []
        await self.close(code=ACCESS_CHANGED)

    async def inbox_update(self, message: dict) -> None:
        await self.send_json({key: message.get(key) for key in FORWARDED})

    async def inbox_batch(self, message: dict) -> None:
        """Updates a serving process coalesced (approvals.events): one frame each, in order."""
        for update in message.get("updates", []):
            await self.inbox_update(update)
