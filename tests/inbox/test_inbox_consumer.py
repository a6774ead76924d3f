"""The live inbox socket (/ws/inbox) through the real ASGI stack with WebsocketCommunicator."""

from __future__ import annotations

import asyncio
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
HOST = (b"host", b"localhost")


# Every socket a test opens, to be ended in that test (below).
_sockets: list[WebsocketCommunicator] = []


def communicator(headers) -> WebsocketCommunicator:
    socket = WebsocketCommunicator(application, "/ws/inbox", headers=headers)
    _sockets.append(socket)
    return socket


@pytest.fixture(autouse=True)
async def _every_socket_ends_in_its_test():
    """End each consumer here, not in the event loop's close.

    A socket the server refused or closed leaves its consumer waiting for the
    disconnect, its channel layer receive still running. The loop's close cancels
    that once; on Python 3.11 redis-py can lose a cancel that lands as a command's
    write completes (``asyncio.wait_for``, CPython gh-86296), and channels_redis's
    receive then polls Redis for ever: the leg hung to its timeout. Daphne cancels
    a lingering consumer again every second; so does this.
    """
    _sockets.clear()
    yield
    for socket in _sockets:
        if not socket.future.done():
            await socket.send_input({"type": "websocket.disconnect", "code": 1000})
        for _ in range(20):
            done, _pending = await asyncio.wait({socket.future}, timeout=0.5)
            if done:
                break
            socket.future.cancel()
        assert socket.future.done(), "a consumer outlived twenty cancels"
    _sockets.clear()


def session_cookie(user) -> str:
    client = Client()
    client.force_login(user)
    return client.cookies["sessionid"].value


async def open_socket(user=None, origin=ORIGIN) -> tuple[WebsocketCommunicator, bool, int | None]:
    headers = [origin, HOST]
    if user is not None:
        cookie = await sync_to_async(session_cookie)(user)
        headers.append((b"cookie", f"sessionid={cookie}".encode()))
    socket = communicator(headers)
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


# --- Access changes close the socket; Origin is exact; bad frames are dropped --------------


async def _closed(socket) -> int:
    output = await socket.receive_output(timeout=5)
    assert output["type"] == "websocket.close", output
    return output["code"]


async def test_logout_closes_that_sessions_socket_and_no_hint_follows(agent, rita):
    client = await sync_to_async(Client)()
    await sync_to_async(client.force_login)(rita.user)
    cookie = client.cookies["sessionid"].value
    headers = [ORIGIN, HOST, (b"cookie", f"sessionid={cookie}".encode())]
    socket = communicator(headers)
    assert (await socket.connect(timeout=5))[0]
    assert (await socket.receive_json_from(timeout=5))["event"] == "hello"
    await sync_to_async(client.post)("/accounts/logout/")
    assert await _closed(socket) == 4403
    await sync_to_async(make_action)(agent.agent)
    assert await socket.receive_nothing(timeout=0.3)
    again = communicator(headers)
    connected, _ = await again.connect(timeout=5)
    assert not connected, "the logged-out session can't reconnect"


async def test_leaving_a_group_closes_the_socket(agent, rita):
    socket = await open_as(rita.user)
    await sync_to_async(rita.user.groups.clear)()
    assert await _closed(socket) == 4403
    await sync_to_async(make_action)(agent.agent)
    assert await socket.receive_nothing(timeout=0.3)


async def test_removing_a_member_from_the_group_side_closes_their_socket(agent, rita, sam):
    from django.contrib.auth.models import Group

    rita_socket = await open_as(rita.user)
    group = await Group.objects.aget(name="reviewers")
    await sync_to_async(group.user_set.remove)(rita.user)
    assert await _closed(rita_socket) == 4403


async def test_a_deactivated_reviewer_loses_the_socket(rita):
    socket = await open_as(rita.user)
    rita.user.is_active = False
    await sync_to_async(rita.user.save)()
    assert await _closed(socket) == 4403


async def test_a_login_elsewhere_does_not_close_the_socket(rita):
    socket = await open_as(rita.user)
    await sync_to_async(Client().post)(
        "/accounts/login/", {"username": "rita", "password": "rita-password"}
    )
    assert await socket.receive_nothing(timeout=0.3)
    await socket.disconnect()


@pytest.mark.parametrize(
    "origin",
    [
        b"http://localhost:9999",
        b"https://localhost:8443",
        b"http://localhost.evil.example",
        b"null",
    ],
)
async def test_another_port_or_host_is_another_origin_and_refused(rita, origin):
    socket, connected, _ = await open_socket(rita.user, origin=(b"origin", origin))
    assert not connected


async def test_the_exact_origin_with_a_port_is_accepted(rita):
    cookie = await sync_to_async(session_cookie)(rita.user)
    headers = [
        (b"origin", b"http://127.0.0.1:8123"),
        (b"host", b"127.0.0.1:8123"),
        (b"cookie", f"sessionid={cookie}".encode()),
    ]
    socket = communicator(headers)
    assert (await socket.connect(timeout=5))[0]
    await socket.disconnect()


async def test_bad_frames_are_dropped_quietly_and_the_socket_stays(rita, caplog):
    socket = await open_as(rita.user)
    await socket.send_to(text_data="not json {")
    await socket.send_to(bytes_data=b"\x00\xff")
    await socket.send_to(text_data="[" * 5000)
    await socket.send_to(text_data='{"event": "ping"}')
    assert (await socket.receive_json_from(timeout=5)) == {"event": "pong"}
    assert "Traceback" not in caplog.text and not any(r.exc_info for r in caplog.records)
    await socket.disconnect()


async def test_a_burst_of_pushes_reaches_the_inbox_in_order_through_batched_sends(
    agent, rita, monkeypatch
):
    from channels.layers import get_channel_layer

    from approvals import events

    socket = await open_as(rita.user)
    layer = get_channel_layer()
    sent = []
    group_send = layer.group_send

    async def counted(group, message):
        sent.append((group, message["type"]))
        await group_send(group, message)

    monkeypatch.setattr(layer, "group_send", counted)
    # A window wide enough that the whole burst falls in it, however slow the machine.
    monkeypatch.setattr(events, "INBOX_COALESCE_S", 1.0)
    # As in a serving process (impri.asgi sets it on the first HTTP request).
    monkeypatch.setattr(events, "serving_loop", asyncio.get_running_loop())
    actions = await sync_to_async(lambda: [make_action(agent.agent) for _ in range(5)])()
    received = [(await socket.receive_json_from(timeout=5))["action_id"] for _ in range(5)]
    assert received == [a.pk for a in actions]
    inbox_sends = [s for s in sent if s[0].startswith("inbox.")]
    # Each inbox group got the five updates as one batch, not five messages.
    assert inbox_sends and all(kind == "inbox.batch" for _, kind in inbox_sends)
    assert len(inbox_sends) == len({group for group, _ in inbox_sends})
    await socket.disconnect()
