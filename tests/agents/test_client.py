"""impri_client against a real `impri serve`: gated, waits, typed errors, the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from impri_client import (
    ActionExpired,
    ActionRejected,
    AlreadySettled,
    AsyncImpri,
    AuthenticationError,
    ChangesRequested,
    Conflict,
    DecisionTimeout,
    Impri,
    NotFound,
    PermissionDenied,
    ValidationError,
    gated,
)

from tests.client_helpers import start_live
from tests.factories import refund_body
from tests.waits import eventually

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def live():
    live = start_live()
    yield live
    live.deployment.close()


@pytest.fixture
def impri(live):
    with Impri(live.url, live.agent_key) as client:
        yield client


@pytest.fixture
def rita(live):
    return live.reviewer()


def in_thread(fn, *args, **kwargs) -> dict:
    """Run ``fn`` in a thread; the returned dict gets ``value`` or ``error`` when it ends."""
    outcome: dict = {}

    def run():
        try:
            outcome["value"] = fn(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            outcome["error"] = exc

    outcome["thread"] = thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return outcome


def finished(outcome: dict, timeout: float = 60) -> dict:
    outcome["thread"].join(timeout)
    assert not outcome["thread"].is_alive(), "the gated call never returned"
    return outcome


def test_gated_runs_with_the_edited_amount_and_reports_what_it_returned(impri, rita):
    calls = []

    @gated(
        impri, kind="payment.refund", title="Refund order 5001", editable=["payload.amount_cents"]
    )
    def refund(payload, decision):
        calls.append((payload, decision.edited_by_human))
        return {"txn": "re_5001", "amount_cents": payload["amount_cents"]}

    run = in_thread(refund, {"order_id": "5001", "amount_cents": 8400, "currency": "USD"})
    action = rita.pending_titled("Refund order 5001")
    assert calls == []  # nothing runs before a decision
    rita.approve(action["action_id"], edits={"payload.amount_cents": 5000}, note="half")

    finished(run)
    assert "error" not in run, run.get("error")
    assert run["value"] == {"txn": "re_5001", "amount_cents": 5000}
    assert calls == [({"order_id": "5001", "amount_cents": 5000, "currency": "USD"}, True)]
    stored = impri.get(action["action_id"])
    assert stored.status == "executed"
    assert stored.result.status == "executed"
    assert stored.result.detail == {"txn": "re_5001", "amount_cents": 5000}
    assert stored.original_payload["amount_cents"] == 8400
    assert stored.decided_by.name == "rita"
    # Timestamps become aware UTC datetimes whatever the server's form (ISO today, seconds soon).
    for moment in (stored.created_at, stored.decision_at, stored.result.reported_at):
        assert moment.tzinfo is not None and moment.utcoffset().total_seconds() == 0
    assert stored.created_at <= stored.decision_at <= stored.result.reported_at
    assert abs((datetime.now(UTC) - stored.created_at).total_seconds()) < 300
    assert stored.expires_at > stored.created_at


def test_changes_requested_raises_with_the_message_and_the_fix_supersedes_it(impri, rita):
    calls = []
    gate = gated(impri, kind="payment.refund", title="Refund order 5003")
    run = in_thread(
        gate(calls.append), {"order_id": "5003", "amount_cents": 9000, "currency": "USD"}
    )
    action = rita.pending_titled("Refund order 5003")
    answer = rita.http.post(
        f"/actions/{action['action_id']}/request-changes", json={"note": "only the mug: 1200"}
    )
    assert answer.status_code == 200, answer.text

    finished(run)
    error = run["error"]
    assert isinstance(error, ChangesRequested)
    assert error.status == "changes_requested"
    assert error.note == "only the mug: 1200"
    assert "changes_requested by rita" in str(error)
    assert calls == []
    fixed = impri.push(
        kind="payment.refund",
        title="Refund order 5003 (mug only)",
        preview="Refund the mug only.",
        payload={"order_id": "5003", "amount_cents": 1200, "currency": "USD"},
        supersedes=error.action_id,
    )
    assert impri.get(fixed.action_id).status == "pending"
    assert rita.http.get(f"/actions/{fixed.action_id}").json()["supersedes"] == error.action_id


def test_a_rejection_raises_with_the_note_and_runs_nothing(impri, rita):
    calls = []
    gate = gated(impri, kind="payment.refund", title="Refund order 5002")
    run = in_thread(
        gate(calls.append), {"order_id": "5002", "amount_cents": 90000, "currency": "USD"}
    )
    action = rita.pending_titled("Refund order 5002")
    rita.reject(action["action_id"], note="over the goodwill limit")

    finished(run)
    error = run["error"]
    assert isinstance(error, ActionRejected)
    assert error.note == "over the goodwill limit"
    assert error.action_id == action["action_id"]
    assert error.decided_by.name == "rita"
    assert "over the goodwill limit" in str(error) and "rejected by rita" in str(error)
    assert calls == []
    assert impri.get(action["action_id"]).status == "rejected"


def test_a_replayed_idempotency_key_never_runs_the_function_twice(impri, rita):
    calls = []

    @gated(impri, kind="payment.refund", title="Refund order 5011", idempotency_key="refund-5011")
    def refund(payload):
        calls.append(payload)
        return "re_5011"

    run = in_thread(refund, {"order_id": "5011", "amount_cents": 300, "currency": "USD"})
    rita.approve(rita.pending_titled("Refund order 5011")["action_id"])
    assert finished(run)["value"] == "re_5011"

    with pytest.raises(AlreadySettled) as again:  # an agent retrying the whole step
        refund({"order_id": "5011", "amount_cents": 300, "currency": "USD"})
    assert again.value.status == "executed"
    assert calls == [{"order_id": "5011", "amount_cents": 300, "currency": "USD"}]


def test_an_expired_action_raises_and_runs_nothing(impri):
    calls = []
    gate = gated(impri, kind="payment.refund", title="Refund order 5012", expires_in_s=1)
    with pytest.raises(ActionExpired) as expired:
        gate(calls.append)({"order_id": "5012", "amount_cents": 100, "currency": "USD"})
    assert expired.value.status == "expired" and "expired" in str(expired.value)
    assert calls == []
    [listed], _ = impri.list_actions(status="expired", kind="payment.refund")
    assert listed.action_id == expired.value.action_id


def test_a_failing_block_reports_failed_and_reraises(impri, rita):
    def run_block():
        with gated(
            impri, kind="order.note", title="Refund order 5003", payload={"order_id": "5003"}
        ) as gate:
            assert gate.payload == {"order_id": "5003"}
            raise RuntimeError("card expired")

    run = in_thread(run_block)
    action = rita.pending_titled("Refund order 5003")
    rita.approve(action["action_id"])
    finished(run)

    assert isinstance(run["error"], RuntimeError)
    stored = impri.get(action["action_id"])
    assert stored.status == "failed"
    assert stored.result.detail == {"error": "RuntimeError", "message": "card expired"}


def test_a_gate_reports_the_processors_reference_beside_its_detail(impri, rita):
    def run_block():
        with gated(
            impri, kind="order.note", title="Refund order 5021", payload={"order_id": "5021"}
        ) as gate:
            assert gate.action_id  # what the agent passes as metadata[impri_action_id]
            gate.detail = {"refund": "re_5021", "note": "kept"}
            gate.reference = "re_5021"

    run = in_thread(run_block)
    action = rita.pending_titled("Refund order 5021")
    rita.approve(action["action_id"])
    assert "error" not in finished(run)
    stored = impri.get(action["action_id"])
    assert stored.result.reference == "re_5021"
    assert stored.result.detail == {"refund": "re_5021", "note": "kept"}
    # A report without a reference reads as None, and report_result takes it directly.
    other = impri.push(**refund_body(title="Refund order 5022"))
    rita.approve(other.action_id)
    reported = impri.report_result(
        other.action_id, status="executed", detail="ok", reference="re_9"
    )
    assert (reported.result.reference, reported.result.detail) == ("re_9", "ok")


def test_await_decision_calls_again_while_pending_until_decided(live, rita):
    calls = []
    http = httpx.Client(event_hooks={"request": [calls.append]})
    with Impri(live.url, live.agent_key, poll_s=0.5, http_client=http) as impri:
        action = impri.push(**refund_body(title="Refund order 5004"))
        assert action.status == "pending"
        waiting = in_thread(impri.await_decision, action.action_id)
        eventually(lambda: len(calls) >= 4)  # four pending answers, and still waiting
        assert waiting["thread"].is_alive()
        rita.approve(action.action_id)
        finished(waiting)

    decision = waiting["value"]
    assert decision.status == "approved" and decision.approved
    assert decision.payload == refund_body()["payload"]
    assert decision.decided_by.name == "rita"
    assert decision.decision_at.tzinfo is not None
    assert all("/decision" in str(request.url) for request in calls[1:])


def test_await_decision_returns_pending_at_its_own_deadline(impri):
    action = impri.push(**refund_body(title="Refund order 5005"))
    decision = impri.await_decision(action.action_id, timeout_s=1)
    assert decision.pending and not decision.approved

    block = gated(impri, kind="order.note", title="t", payload={"a": 1}, timeout_s=0.5)
    with pytest.raises(DecisionTimeout), block:
        raise AssertionError("the block must not run")


def test_errors_are_typed(live, impri, rita):
    with Impri(live.url, "imp_a_not-a-key") as stranger, pytest.raises(AuthenticationError) as e:
        stranger.get("act_whatever")
    assert e.value.status_code == 401

    with Impri(live.url, live.reviewer_key) as reviewer, pytest.raises(PermissionDenied):
        reviewer.push(**refund_body())

    with pytest.raises(NotFound):
        impri.get("act_does_not_exist")

    with pytest.raises(ValidationError) as e:
        impri.push(**refund_body(editable=["payload.nope"]))
    assert e.value.status_code == 422 and e.value.field == "editable"
    with pytest.raises(ValidationError) as e:
        impri.push(**refund_body(kind="Not A Kind"))
    assert e.value.field == "kind"

    action = impri.push(**refund_body(title="Refund order 5006"))
    rita.reject(action.action_id, note="no")
    with pytest.raises(Conflict) as e:
        impri.cancel(action.action_id, reason="changed my mind")
    assert e.value.status_code == 409
    with pytest.raises(Conflict):
        impri.report_result(action.action_id, status="executed", detail="sent anyway")


def test_cancel_and_idempotent_push(impri):
    body = refund_body(title="Refund order 5007", idempotency_key="refund-5007")
    first = impri.push(**body)
    again = impri.push(**body)
    assert again.action_id == first.action_id
    with pytest.raises(Conflict):
        impri.push(
            **{**body, "payload": {"order_id": "5007", "amount_cents": 1, "currency": "USD"}}
        )

    cancelled = impri.cancel(first.action_id, reason="customer withdrew")
    assert cancelled.status == "cancelled"
    assert impri.await_decision(first.action_id, timeout_s=5).status == "cancelled"


async def test_async_client_and_async_gated(live, rita):
    async with AsyncImpri(live.url, live.agent_key) as impri:

        @gated(impri, kind="payment.refund", title="Refund order 5008")
        async def refund(payload):
            return f"refunded {payload['amount_cents']}"

        import asyncio

        task = asyncio.create_task(
            refund({"order_id": "5008", "amount_cents": 700, "currency": "USD"})
        )
        action = await asyncio.to_thread(rita.pending_titled, "Refund order 5008")
        await asyncio.to_thread(rita.approve, action["action_id"])
        assert await asyncio.wait_for(task, 60) == "refunded 700"
        stored = await impri.get(action["action_id"])
        assert (stored.status, stored.result.detail) == ("executed", "refunded 700")


def agent_cli(live, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    script = Path(sys.executable).parent / "impri-agent"
    env = {**os.environ, "IMPRI_URL": live.url, "IMPRI_API_KEY": live.agent_key}
    return subprocess.run(
        [str(script), *args], input=stdin, env=env, capture_output=True, text=True, timeout=120
    )


def test_the_agent_cli_pushes_awaits_reports_and_gets(live, rita):
    pushed = agent_cli(live, "push", stdin=json.dumps(refund_body(title="Refund order 5009")))
    assert pushed.returncode == 0, pushed.stderr
    action_id = json.loads(pushed.stdout)["action_id"]

    still = agent_cli(live, "await", action_id, "--timeout-s", "0.5")
    assert still.returncode == 4 and json.loads(still.stdout)["status"] == "pending"

    rita.approve(action_id, edits={"payload.amount_cents": 4200})
    decided = agent_cli(live, "await", action_id)
    assert decided.returncode == 0, decided.stderr
    assert json.loads(decided.stdout)["payload"]["amount_cents"] == 4200

    reported = agent_cli(live, "report", action_id, "--status", "executed", "--detail", "re_42")
    assert reported.returncode == 0, reported.stderr
    got = json.loads(agent_cli(live, "get", action_id).stdout)
    assert (got["status"], got["result"]["detail"]) == ("executed", "re_42")

    refused = agent_cli(live, "push", stdin=json.dumps(refund_body(kind="BAD")))
    assert refused.returncode == 1
    assert json.loads(refused.stderr)["field"] == "kind"


def test_the_agent_cli_exits_3_on_a_rejection(live, rita):
    pushed = agent_cli(live, "push", stdin=json.dumps(refund_body(title="Refund order 5010")))
    action_id = json.loads(pushed.stdout)["action_id"]
    rita.reject(action_id, note="duplicate ticket")
    rejected = agent_cli(live, "await", action_id)
    assert rejected.returncode == 3
    assert json.loads(rejected.stdout)["note"] == "duplicate ticket"
