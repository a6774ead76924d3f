"""The decision long-poll's consumer (waiting.consumers) answers as the API's route does.

Both are driven as daphne drives them, through ASGI: the served application
(``impri.asgi.application``: the access log, the body limit, Channels' router, which
sends ``GET /api/v1/actions/{id}/decision`` to ``DecisionConsumer``) and Django's own
handler (``impri.asgi.django_asgi``, where the same path is the ninja route
``agent_doors.api.agent.await_decision``). For every status an action can be in and every
error, the two answers are equal: status, body and the headers an agent reads.
"""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from asgiref.sync import sync_to_async
from asgiref.testing import ApplicationCommunicator
from django.db import OperationalError
from django.utils import timezone

from agent_doors.api import agent as agent_routes
from approvals import services
from approvals.models import Action, ActionStatus
from approvals.services import waiting as waiting_service
from impri.asgi import application, django_asgi
from tests.factories import make_action
from tests.waits import until, until_parked
from waiting import consumers
from waiting import hub as waiting

pytestmark = pytest.mark.django_db(transaction=True)

# The headers an agent reads; the rest (the request id, the date) differ by call.
COMPARED_HEADERS = {
    "content-type",
    "cache-control",
    "retry-after",
    "allow",
    "x-frame-options",
    "x-content-type-options",
    "referrer-policy",
    "location",
}


def scope(path: str, query: str = "", key: str | None = None, method: str = "GET") -> dict:
    headers = [(b"host", b"testserver")]
    if key is not None:
        raw = key.removeprefix("raw:") if key.startswith("raw:") else f"Bearer {key}"
        headers.append((b"authorization", raw.encode()))
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query.encode(),
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
    }


async def start(app, path: str, query: str = "", key: str | None = None, method: str = "GET"):
    communicator = ApplicationCommunicator(app, scope(path, query, key, method))
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
        if name.decode().lower() in COMPARED_HEADERS
    }
    return start["status"], headers, json.loads(body) if body else None


async def served(path: str, query: str = "", key: str | None = None, method: str = "GET"):
    """The answer of the served application (the consumer)."""
    return await answer(await start(application, path, query, key, method))


async def api(path: str, query: str = "", key: str | None = None, method: str = "GET"):
    """The answer of the API's route, through Django's own ASGI handler."""
    return await answer(await start(django_asgi, path, query, key, method))


async def both(path: str, query: str = "", key: str | None = None, method: str = "GET"):
    by_consumer = await served(path, query, key, method)
    by_api = await api(path, query, key, method)
    return by_consumer, by_api


def decision_path(action) -> str:
    return f"/api/v1/actions/{action.pk}/decision"


def without_grant(answer_):
    status, headers, body = answer_
    return status, headers, {k: v for k, v in body.items() if k != "grant"}


def test_the_consumer_and_the_route_default_to_the_same_wait():
    assert (
        consumers.DEFAULT_AWAIT_S == agent_routes.DEFAULT_AWAIT_S == waiting_service.DEFAULT_AWAIT_S
    )


async def test_every_status_is_answered_as_the_api_answers_it(agent, rita):
    def settle(action_id: str, status: str) -> None:
        if status == "approved":
            services.decide(
                action_id, by=rita.user, verdict="approve", edits={"payload.amount_cents": 5000}
            )
        elif status == "rejected":
            services.decide(action_id, by=rita.user, verdict="reject", note="no")
        elif status == "changes_requested":
            services.request_changes(action_id, by=rita.user, note="split it")
        elif status == "cancelled":
            services.cancel_action(action_id, agent=agent.agent, reason="not needed")
        elif status == "expired":  # overdue: a reader sees it expired before any sweep
            Action.objects.filter(pk=action_id).update(expires_at=timezone.now())
        elif status in ("executed", "failed"):
            services.decide(action_id, by=rita.user, verdict="approve")
            services.report_result(action_id, agent=agent.agent, status=status, detail="done")

    statuses = [
        "pending",
        "approved",
        "rejected",
        "changes_requested",
        "cancelled",
        "expired",
        "executed",
        "failed",
    ]
    for status in statuses:
        action = await sync_to_async(make_action)(agent.agent)
        await sync_to_async(settle)(action.pk, status)
        by_consumer, by_api = await both(decision_path(action), "timeout_s=0", agent.key)
        assert by_consumer[0] == 200 and by_consumer[2]["status"] == status, by_consumer
        assert by_consumer[1]["cache-control"] == "no-store"
        # A grant is signed when it is read: its time may differ by a second between the two.
        assert without_grant(by_consumer) == without_grant(by_api), status
        if status == "approved":
            assert by_consumer[2]["grant"] and by_consumer[2]["payload"]["amount_cents"] == 5000
    assert {s.value for s in ActionStatus} <= set(statuses)


async def test_every_error_is_answered_as_the_api_answers_it(agent, other_agent, rita):
    action = await sync_to_async(make_action)(agent.agent)
    path = decision_path(action)
    cases = [
        (path, "timeout_s=0", None, 401, "not_authenticated"),
        (path, "timeout_s=0", "imp_a_not-a-key", 401, "not_authenticated"),
        (path, "timeout_s=0", f"raw:Basic {agent.key}", 401, "not_authenticated"),
        (path, "timeout_s=0", "raw:Bearer", 401, "not_authenticated"),
        (path, "timeout_s=0", rita.key, 403, "forbidden"),
        (path, "timeout_s=0", other_agent.key, 403, "forbidden"),
        ("/api/v1/actions/act_nope/decision", "timeout_s=0", agent.key, 404, "not_found"),
        ("/api/v1/actions/" + "é" * 3 + "/decision", "timeout_s=0", agent.key, 404, "not_found"),
        ("/api/v1/actions/" + "a" * 120 + "/decision", "timeout_s=0", agent.key, 404, "not_found"),
        (path, "timeout_s=-1", agent.key, 422, "invalid"),
        (path, "timeout_s=soon", agent.key, 422, "invalid"),
        (path, "timeout_s=", agent.key, 422, "invalid"),
        (path, "timeout_s=5&timeout_s=", agent.key, 422, "invalid"),
        (path, "timeout_s=-1", None, 401, "not_authenticated"),  # the key first
        (path, "timeout_s=-1", rita.key, 422, "invalid"),  # the parameters, then the view
        (path, "timeout_s=0%00", agent.key, 422, "invalid"),
        (path, "timeout_s=0&timeout_s=0.5", agent.key, 200, None),
        (path, "timeout_s=0e0", agent.key, 200, None),
    ]
    for case_path, query, key, status, code in cases:
        by_consumer, by_api = await both(case_path, query, key)
        assert by_consumer == by_api, (query, key)
        assert by_consumer[0] == status, (query, key, by_consumer)
        if code:
            assert by_consumer[2]["code"] == code, by_consumer
            assert by_consumer[1]["content-type"].startswith("application/json")
    by_consumer, by_api = await both(path, "timeout_s=0", agent.key, method="POST")
    assert by_consumer == by_api and by_consumer[0] == 405
    assert by_consumer[1]["allow"] == "GET"


async def test_a_rate_limited_key_is_answered_as_the_api_answers_it(agent, settings):
    settings.IMPRI_RATE_LIMIT_PER_MIN = 2
    action = await sync_to_async(make_action)(agent.agent)
    path = decision_path(action)
    if time.time() % 60 > 50:  # the limiter counts per wall-clock minute: start in one
        await asyncio.sleep(60 - time.time() % 60 + 0.1)
    assert (await served(path, "timeout_s=0", agent.key))[0] == 200
    assert (await api(path, "timeout_s=0", agent.key))[0] == 200
    by_consumer, by_api = await both(path, "timeout_s=0", agent.key)
    # Retry-After counts the seconds left in the minute, so the later answer (the API's)
    # may say one less when a second ticks between the two; the rest is equal.
    waits = [int(answer_[1].pop("retry-after")) for answer_ in (by_consumer, by_api)]
    assert by_consumer == by_api
    assert by_consumer[0] == 429 and by_consumer[2]["code"] == "rate_limited"
    assert 1 <= waits[1] <= waits[0] <= 60


@pytest.mark.parametrize(
    "failure, status, code",
    [
        (OperationalError("the database went away"), 503, "unavailable"),
        (KeyError("x"), 500, "internal"),
    ],
)
async def test_a_failure_is_answered_as_the_api_answers_it(
    agent, monkeypatch, failure, status, code
):
    action = await sync_to_async(make_action)(agent.agent)

    async def fails(*args, **kwargs):  # fault injection: the wait's read of the row fails
        raise failure

    monkeypatch.setattr("approvals.services.waiting._read", fails)
    by_consumer, by_api = await both(decision_path(action), "timeout_s=0", agent.key)
    assert by_consumer == by_api
    assert by_consumer[0] == status and by_consumer[2]["code"] == code


async def test_a_decision_wakes_the_wait_at_once(agent, rita):
    action = await sync_to_async(make_action)(agent.agent)
    communicator = await start(application, decision_path(action), "timeout_s=30", agent.key)
    await until_parked(count=1, timeout=10)
    await sync_to_async(services.decide)(action.pk, by=rita.user, verdict="reject", note="no")
    status, _, body = await answer(communicator, timeout=5)
    assert (status, body["status"], body["note"]) == (200, "rejected", "no")
    assert waiting.waiting() == 0


async def test_a_wait_daphne_gives_up_on_leaves_the_hub(agent):
    """A client gone: daphne cancels the consumer (``application_close_timeout``)."""
    action = await sync_to_async(make_action)(agent.agent)
    communicator = await start(application, decision_path(action), "timeout_s=30", agent.key)
    await until_parked(count=1, timeout=10)
    communicator.future.cancel()
    await communicator.wait(5)
    await until(lambda: waiting.waiting() == 0, timeout=5)
