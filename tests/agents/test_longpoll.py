"""The decision long-poll served below Django (approvals.api.longpoll): Django's answers, less held.

Driven through the whole ASGI application (``impri.asgi.application``: the access log,
the body limit, the router), as daphne calls it. ``timeout_s=0e0`` is a spelling the
long-poll leaves to Django (ninja reads it as 0), which is how the two paths are put
side by side; the handler's ``fallback`` is counted to know which path answered.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from asgiref.sync import sync_to_async
from asgiref.testing import ApplicationCommunicator

from approvals import services
from approvals.services import waiting
from impri.asgi import application, django_asgi
from tests.factories import make_action
from tests.waits import until_parked

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def fallbacks(monkeypatch) -> list[str]:
    """The paths the long-poll handed to Django's API handler."""
    handed: list[str] = []
    original = django_asgi.longpoll.fallback

    async def counting(scope, receive, send):
        handed.append(scope["path"] + "?" + scope["query_string"].decode())
        return await original(scope, receive, send)

    monkeypatch.setattr(django_asgi.longpoll, "fallback", counting)
    return handed


def scope(path: str, query: str = "", key: str | None = None) -> dict:
    headers = [(b"host", b"testserver")]
    if key is not None:
        headers.append((b"authorization", f"Bearer {key}".encode()))
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query.encode(),
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
    }


async def start(path: str, query: str = "", key: str | None = None) -> ApplicationCommunicator:
    communicator = ApplicationCommunicator(application, scope(path, query, key))
    await communicator.send_input({"type": "http.request", "body": b"", "more_body": False})
    return communicator


async def answer(communicator: ApplicationCommunicator, timeout: float = 10):
    start = await communicator.receive_output(timeout)
    body = b""
    while True:
        message = await communicator.receive_output(timeout)
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    await communicator.wait(timeout)
    headers = {
        name.decode().lower(): value.decode()
        for name, value in start["headers"]
        if name.lower() != b"x-request-id"
    }
    return start["status"], headers, json.loads(body)


async def get(path: str, query: str = "", key: str | None = None):
    return await answer(await start(path, query, key))


def decision_path(action) -> str:
    return f"/api/v1/actions/{action.pk}/decision"


async def test_a_pending_and_an_approved_answer_are_djangos_byte_for_byte(agent, rita, fallbacks):
    action = await sync_to_async(make_action)(agent.agent)
    served = await get(decision_path(action), "timeout_s=0", agent.key)
    assert fallbacks == []
    django = await get(decision_path(action), "timeout_s=0e0", agent.key)
    assert len(fallbacks) == 1
    assert served == django
    assert served[0] == 200 and served[2]["status"] == "pending"
    assert served[1]["cache-control"] == "no-store"  # the API middleware's after hooks ran

    await sync_to_async(services.decide)(
        action.pk, by=rita.user, verdict="approve", edits={"payload.amount_cents": 5000}
    )
    served = await get(decision_path(action), "timeout_s=0", agent.key)
    django = await get(decision_path(action), "timeout_s=0e0", agent.key)
    assert len(fallbacks) == 2
    assert served[2]["status"] == "approved" and served[2]["payload"]["amount_cents"] == 5000
    assert served[2]["grant"] and served[2]["payload_sha256"]
    # A grant is signed when it is read: its time may differ by a second between the two.
    assert {k: v for k, v in served[2].items() if k != "grant"} == {
        k: v for k, v in django[2].items() if k != "grant"
    }
    assert served[:2] == django[:2]


async def test_every_refusal_is_djangos_or_ninjas(agent, other_agent, rita, fallbacks):
    action = await sync_to_async(make_action)(agent.agent)
    path = decision_path(action)
    handed_to_django = [
        (path, "timeout_s=0", None, 401, "not_authenticated"),
        (path, "timeout_s=0", "imp_a_not-a-key", 401, "not_authenticated"),
        (path, "timeout_s=0", rita.key, 403, "forbidden"),
        (path, "timeout_s=-1", agent.key, 422, None),
        (path, "timeout_s=soon", agent.key, 422, None),
        (path, "timeout_s=", agent.key, 422, None),
        (path, "timeout_s=5&timeout_s=", agent.key, 422, None),
        (path, "&".join(["f=1"] * 1001) + "&timeout_s=0", agent.key, 400, None),
        (path, "timeout_s=0&timeout_s=1", agent.key, 200, None),
    ]
    for case_path, query, key, status, code in handed_to_django:
        got_status, _, body = await get(case_path, query, key)
        assert got_status == status, (query, key, body)
        if code:
            assert body["code"] == code, body
    assert len(fallbacks) == len(handed_to_django)
    # Refused by the service once the key is checked: the API's answer, as ninja gives it.
    for case_path, key, status, code in [
        (path, other_agent.key, 403, "forbidden"),
        ("/api/v1/actions/act_nope/decision", agent.key, 404, "not_found"),
    ]:
        served = await get(case_path, "timeout_s=0", key)
        django = await get(case_path, "timeout_s=0e0", key)
        assert served == django
        assert served[0] == status and served[2]["code"] == code
    assert len(fallbacks) == len(handed_to_django) + 2  # only the 0e0 spellings


async def test_a_key_handed_on_to_django_is_counted_once(rita, settings, fallbacks):
    from identity import keys

    settings.IMPRI_RATE_LIMIT_PER_MIN = 3
    action_path = "/api/v1/actions/act_any/decision"
    statuses = [(await get(action_path, "timeout_s=0", rita.key))[0] for _ in range(3)]
    assert statuses == [403, 403, 403]  # a reviewer's key: Django's 403, not yet limited
    assert len(fallbacks) == 3
    # The fourth call in the minute is the first over the limit (each was counted once).
    with pytest.raises(keys.RateLimited):
        await sync_to_async(keys.authenticate)(rita.key)


async def test_an_action_id_no_layer_takes_leaves_the_layer_up(agent):
    await sync_to_async(make_action)(agent.agent)
    status, _, body = await get(
        "/api/v1/actions/" + "é" * 3 + "/decision", "timeout_s=0", agent.key
    )
    assert status == 404
    status, _, body = await get(
        "/api/v1/actions/" + "a" * 120 + "/decision", "timeout_s=0", agent.key
    )
    assert status == 404
    assert waiting.hub().layer_ok  # not taken for a channel layer failure


async def test_a_decision_wakes_the_wait_at_once(agent, rita, fallbacks):
    action = await sync_to_async(make_action)(agent.agent)
    communicator = await start(decision_path(action), "timeout_s=30", agent.key)
    await until_parked(count=1, timeout=10)
    await sync_to_async(services.decide)(action.pk, by=rita.user, verdict="reject", note="no")
    status, _, body = await answer(communicator, timeout=5)
    assert (status, body["status"], body["note"]) == (200, "rejected", "no")
    assert fallbacks == []
    assert waiting.waiting() == 0


async def test_a_client_that_goes_away_ends_its_wait(agent, fallbacks):
    action = await sync_to_async(make_action)(agent.agent)
    communicator = await start(decision_path(action), "timeout_s=30", agent.key)
    await until_parked(count=1, timeout=10)
    await communicator.send_input({"type": "http.disconnect"})
    await communicator.wait(5)  # the app returned, without an answer
    assert await communicator.receive_nothing(0.1)
    for _ in range(50):
        if waiting.waiting() == 0:
            break
        await asyncio.sleep(0.1)
    assert waiting.waiting() == 0
    assert fallbacks == []


async def test_a_pending_answer_is_written_on_the_work_lane_a_decision_on_the_wake_lane(
    agent, rita, monkeypatch
):
    from plumbing import db_threads

    lanes: list[tuple[str, str]] = []
    real = db_threads.run

    async def recording(fn, *args, lane: str = "work", **kwargs):
        lanes.append((getattr(fn, "__name__", str(fn)), lane))
        return await real(fn, *args, lane=lane, **kwargs)

    monkeypatch.setattr(db_threads, "run", recording)
    action = await sync_to_async(make_action)(agent.agent)
    assert (await get(decision_path(action), "timeout_s=0", agent.key))[2]["status"] == "pending"
    assert ("decision_out", "work") in lanes and ("decision_out", "wake") not in lanes
    lanes.clear()
    await sync_to_async(services.decide)(action.pk, by=rita.user, verdict="approve")
    assert (await get(decision_path(action), "timeout_s=0", agent.key))[2]["status"] == "approved"
    assert ("decision_out", "wake") in lanes and ("decision_out", "work") not in lanes
