"""The live inbox socket (/ws/inbox) through the real ASGI stack with WebsocketCommunicator."""

from __future__ import annotations

from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import Client
from django.utils import timezone

from approvals import services
from impri.asgi import application
from rules import services as rules
from tests.factories import make_action

# The consumer reads the database from its own thread: the rows must be committed.
pytestmark = pytest.mark.django_db(transaction=True)

ORIGIN = (b"origin", b"http://localhost")


def session_cookie(user) -> str:
    client = Client()
    client.force_login(user)
    return client.cookies["sessionid"].value


async def open_socket(user=None, origin=ORIGIN) -> tuple[WebsocketCommunicator, bool, int | None]:
    headers = [origin]
    if user is not None:
        cookie = await sync_to_async(session_cookie)(user)
        headers.append((b"cookie", f"sessionid={cookie}".encode()))
    socket = WebsocketCommunicator(application, "/ws/inbox", headers=headers)
    connected, code = await socket.connect(timeout=5)
    return socket, connected, code


async def open_as(user) -> WebsocketCommunicator:
    socket, connected, _ = await open_socket(user)
    assert connected
    assert (await socket.receive_json_from(timeout=5))["event"] == "hello"
    return socket


async def test_a_push_reaches_a_connected_reviewer(agent, rita):
    socket = await open_as(rita.user)
    action = await sync_to_async(make_action)(agent.agent)
    message = await socket.receive_json_from(timeout=5)
    assert message["action_id"] == action.pk
    assert message["status"] == "pending"
    assert message["event"] == "action.pushed"
    assert message["expires_at"] == action.expires_at.isoformat()
    await socket.disconnect()


async def test_a_decision_reaches_the_other_reviewers_with_who_decided(agent, rita, sam):
    action = await sync_to_async(make_action)(agent.agent)
    socket = await open_as(rita.user)
    await sync_to_async(services.decide)(action.pk, by=sam.user, verdict="approve")
    message = await socket.receive_json_from(timeout=5)
    assert message["action_id"] == action.pk
    assert message["status"] == "approved"
    assert message["decided_by"] == {"type": "reviewer", "name": "sam"}
    assert message["decided_at"]
    await socket.disconnect()


async def test_an_expiry_reaches_the_inbox(agent, rita):
    action = await sync_to_async(make_action)(agent.agent, expires_in_s=1)
    socket = await open_as(rita.user)
    expired = await sync_to_async(services.expire_due)(timezone.now() + timedelta(seconds=5))
    assert expired == 1
    message = await socket.receive_json_from(timeout=5)
    assert (message["action_id"], message["status"]) == (action.pk, "expired")
    await socket.disconnect()


async def test_a_reviewer_hears_only_their_own_groups(agent, mallory):
    await sync_to_async(rules.replace_rules)(
        rules.parse_yaml("rules: [{name: mail, kind: email.*, then: review, group: marketing}]"),
        by="test",
    )
    socket = await open_as(mallory.user)
    refund = await sync_to_async(make_action)(agent.agent)  # routed to reviewers
    email = await sync_to_async(make_action)(
        agent.agent, kind="email.send", payload={"to": "a@example.com"}, editable=[]
    )
    # Pushed second, heard first: the refund in another group never arrived.
    message = await socket.receive_json_from(timeout=5)
    assert message["action_id"] == email.pk != refund.pk
    await socket.disconnect()


async def test_an_unauthenticated_socket_is_refused(db):
    socket, connected, code = await open_socket(None)
    assert connected is False
    assert code == 4401
    # A refused consumer still listens on its channel until told the socket is gone:
    # left to the event loop's teardown, cancelling its Redis receive can hang the run.
    await socket.disconnect()


async def test_a_socket_from_a_foreign_origin_is_refused(rita):
    socket, connected, _ = await open_socket(rita.user, origin=(b"origin", b"https://evil.example"))
    assert connected is False
    await socket.disconnect()


async def test_the_socket_answers_a_ping(rita):
    socket = await open_as(rita.user)
    await socket.send_json_to({"event": "ping"})
    assert await socket.receive_json_from(timeout=5) == {"event": "pong"}
    await socket.disconnect()


async def test_an_action_moved_out_of_a_group_is_announced_to_that_group(agent, rita):
    """An escalation tells the group the action left, so its open queues drop the row."""
    from django.contrib.auth.models import Group
    from django.db import transaction

    from approvals import events
    from approvals.models import Action

    action = await sync_to_async(make_action)(agent.agent)
    socket = await open_as(rita.user)

    def move_to_finance():
        with transaction.atomic():
            finance = Group.objects.create(name="finance")
            old_group = action.review_group_id
            Action.objects.filter(pk=action.pk).update(review_group=finance)
            moved = Action.objects.get(pk=action.pk)
            events.publish_on_commit(moved, "action.escalated", also_review_group_ids=[old_group])

    await sync_to_async(move_to_finance)()
    message = await socket.receive_json_from(timeout=5)
    assert (message["action_id"], message["event"]) == (action.pk, "action.escalated")
    await socket.disconnect()
