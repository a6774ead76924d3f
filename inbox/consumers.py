"""The live inbox: /ws/inbox forwards changes in the reviewer's groups to their browser.

The consumer only joins groups and forwards (the messages come from
``approvals.events.publish_on_commit``). It sends hints, never data a
reviewer could not already read: the browser fetches each row or fragment
over HTTP, where the usual permission checks apply.
"""

from __future__ import annotations

from channels.generic.websocket import AsyncJsonWebsocketConsumer

from approvals import dbexec
from approvals.events import INBOX_ALL_GROUP, inbox_group

# Close codes in the application range (4000-4999), shown to the browser.
NOT_LOGGED_IN = 4401

FORWARDED = ("action_id", "status", "event", "created_at", "expires_at", "decided_at", "decided_by")


@dbexec.wrap
def channel_groups_for(user) -> list[str]:
    if user.is_superuser:
        return [INBOX_ALL_GROUP]
    return [inbox_group(pk) for pk in user.groups.values_list("pk", flat=True)]


class InboxConsumer(AsyncJsonWebsocketConsumer):
    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated or not user.is_active:
            # Closing before accepting refuses the handshake (HTTP 403).
            await self.close(code=NOT_LOGGED_IN)
            return
        self.joined = await channel_groups_for(user)
        for group in self.joined:
            await self.channel_layer.group_add(group, self.channel_name)
        await self.accept()
        await self.send_json({"event": "hello", "groups": len(self.joined)})

    async def disconnect(self, code: int) -> None:
        for group in getattr(self, "joined", []):
            await self.channel_layer.group_discard(group, self.channel_name)

    async def receive_json(self, content, **kwargs) -> None:
        # The socket is one-way; a browser's "ping" gets a "pong" to prove the path is alive.
        if isinstance(content, dict) and content.get("event") == "ping":
            await self.send_json({"event": "pong"})

    async def inbox_update(self, message: dict) -> None:
        await self.send_json({key: message.get(key) for key in FORWARDED})
