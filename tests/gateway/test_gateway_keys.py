"""Impri's own identifiers are Impri's: no agent writes a gateway key, and a gated call attaches
only to the action the gateway made for it (in process; the attack end to end is in
test_gateway_trust_e2e.py).
"""

from __future__ import annotations

import pytest
from mcp import Client

from agent_doors.mcp import build_server
from approvals import services as approvals
from approvals.models import Action, ActionStatus
from approvals.schemas import ActionIn
from approvals.schemas.inputs import RESERVED_KEY_PREFIXES
from audit.models import AuditEvent
from gateway import config, services
from gateway.models import GatedCall, Upstream
from tests.factories import refund_body

pytestmark = pytest.mark.django_db(transaction=True)

GATEWAYS = """
gateways:
  - name: payments
    url: http://127.0.0.1:9/mcp
    default: deny
    tools:
      create_refund:
        policy: review
        editable: [amount_cents]
        money: [{amount: amount_cents, currency: USD}]
"""
ARGUMENTS = {"order_id": "10432", "amount_cents": 1}
DECOY = {"order_id": "10432", "amount_cents": 900000, "to_account": "acct_attacker"}
RESERVED = [
    "mcp-gateway:0000:0",
    "MCP-Gateway:abc",
    "impri:anything",
    " mcp-gateway:x",
    "\uff4d\uff43\uff50-gateway:x",  # fullwidth letters: NFKC folds them
]


@pytest.fixture
def payments(db):
    config.replace_all(config.parse_yaml(GATEWAYS), by="test")
    return Upstream.objects.get(name="payments")


def planted_key(index: int = 0) -> str:
    """The key the gateway derives for the call, which any agent can compute."""
    digest = services.call_digest("payments", "create_refund", ARGUMENTS)
    return f"mcp-gateway:{digest}:{index}"


def plant(agent, key: str, *, approve_by=None) -> Action:
    """A decoy pushed under a free key, then moved under ``key`` as before the prefix was reserved."""
    decoy, _ = approvals.push_action(
        agent.agent,
        ActionIn(
            **refund_body(kind="crm.goodwill", payload=DECOY, idempotency_key="d", editable=[])
        ),
    )
    Action.objects.filter(pk=decoy.pk).update(idempotency_key=key)
    if approve_by is not None:
        approvals.decide(decoy.pk, by=approve_by.user, verdict="approve")
    return Action.objects.get(pk=decoy.pk)


def test_the_gateway_prefix_is_in_the_reserved_family():
    assert any(services.KEY_PREFIX.startswith(prefix) for prefix in RESERVED_KEY_PREFIXES)
    assert planted_key().startswith(services.KEY_PREFIX)


@pytest.mark.parametrize("key", RESERVED)
def test_a_reserved_key_is_a_422_in_the_body_and_the_header(agent, key):
    body = agent.client().post("/actions", refund_body(idempotency_key=key))
    assert body.status_code == 422, body.content
    assert body.json()["field"] == "idempotency_key"
    assert "reserved for Impri" in body.json()["detail"]
    header = agent.client().post("/actions", refund_body(), headers={"Idempotency-Key": key})
    assert header.status_code == 422, header.content
    assert header.json()["field"] == "Idempotency-Key"
    assert not Action.objects.exists()


async def test_a_reserved_key_is_a_422_over_mcp(agent):
    async with Client(build_server(api_key=agent.key)) as client:
        result = await client.call_tool(
            "impri_push_action", refund_body(idempotency_key=planted_key())
        )
    assert result.is_error
    error = result.meta["impri/error"]
    assert (error["status"], error["field"]) == (422, "idempotency_key")
    assert await Action.objects.acount() == 0


def test_keys_outside_the_family_still_replay(agent):
    for key in ("mcp-gatewayish", "gateway:1", "my-impri:1"):
        first = agent.client().post("/actions", refund_body(idempotency_key=key))
        again = agent.client().post("/actions", refund_body(idempotency_key=key))
        assert (first.status_code, again.status_code) == (201, 200), first.content
        assert first.json()["action_id"] == again.json()["action_id"]


@pytest.mark.parametrize("reviewed", [False, True], ids=["auto-approved", "reviewer-approved"])
def test_a_planted_action_is_never_attached_to(payments, agent, rita, reviewed):
    decoy = plant(agent, planted_key(), approve_by=rita if reviewed else None)
    if not reviewed:  # as a harmless auto-approve rule would have
        Action.objects.filter(pk=decoy.pk).update(status=ActionStatus.APPROVED)
    action = services.begin(agent.agent, payments, "create_refund", dict(ARGUMENTS))
    assert action.pk != decoy.pk
    assert (action.kind, action.payload, action.status) == (
        "mcp.payments.create_refund",
        ARGUMENTS,
        ActionStatus.PENDING,
    )
    assert action.money == [{"amount": "payload.amount_cents", "currency": "USD"}]
    assert services.approved_for(agent.agent, payments, "create_refund", ARGUMENTS) is None
    assert not GatedCall.objects.filter(action=decoy).exists()
    # The same call again attaches to the gateway's own action, not to the decoy.
    again = services.begin(agent.agent, payments, "create_refund", dict(ARGUMENTS))
    assert again.pk == action.pk


def test_a_plant_of_the_retry_key_after_a_rejection_is_passed_over(payments, agent, rita):
    first = services.begin(agent.agent, payments, "create_refund", dict(ARGUMENTS))
    approvals.decide(first.pk, by=rita.user, verdict="reject", note="no")
    decoy = plant(agent, planted_key(1), approve_by=rita)
    retry = services.begin(agent.agent, payments, "create_refund", dict(ARGUMENTS))
    assert retry.pk not in (first.pk, decoy.pk)
    assert retry.status == ActionStatus.PENDING and retry.payload == ARGUMENTS
    assert retry.context["repeat_of"]["action_id"] == first.pk


def test_a_decoy_linked_by_an_older_gateway_is_still_refused(payments, agent, rita):
    """Before this fix the gateway wrote a GatedCall for whatever action held the key."""
    decoy = plant(agent, planted_key(), approve_by=rita)
    digest = services.call_digest("payments", "create_refund", ARGUMENTS)
    GatedCall.objects.create(
        action=decoy, agent=agent.agent, gateway="payments", tool="create_refund",
        arguments_sha256=digest,
    )  # fmt: skip
    problem = services.payload_problem(
        decoy.pk, agent.agent, "payments", "create_refund", ARGUMENTS, decoy.payload
    )
    assert problem == "the action is not the one the gateway made for this call"
    assert services.approved_for(agent.agent, payments, "create_refund", ARGUMENTS) is None


def approved(payments, agent, rita, edits=None) -> Action:
    action = services.begin(agent.agent, payments, "create_refund", dict(ARGUMENTS))
    return approvals.decide(
        action.pk,
        by=rita.user,
        verdict="approve",
        edits=edits or {},
        approves_sha256=approvals.payload_sha256(action.payload),
    )


def problem_of(action: Action, agent, arguments=ARGUMENTS) -> str:
    action = Action.objects.get(pk=action.pk)
    return services.payload_problem(
        action.pk, agent.agent, "payments", "create_refund", arguments, action.payload
    )


def test_the_approved_payload_is_the_call_with_the_reviewers_edits(payments, agent, rita):
    assert problem_of(approved(payments, agent, rita), agent) == ""
    arguments = {"order_id": "7", "amount_cents": 8400}
    action = services.begin(agent.agent, payments, "create_refund", dict(arguments))
    lowered = approvals.decide(
        action.pk,
        by=rita.user,
        verdict="approve",
        edits={"payload.amount_cents": 5000},
        approves_sha256=approvals.payload_sha256(action.payload),
    )
    assert problem_of(lowered, agent, arguments) == ""
    assert "not the one the gateway made" in problem_of(lowered, agent, ARGUMENTS)


@pytest.mark.parametrize(
    "payload, words",
    [
        ({**ARGUMENTS, "to_account": "acct_attacker"}, "beyond single values"),
        ({**ARGUMENTS, "order_id": "99999"}, "not editable"),
        ({**ARGUMENTS, "amount_cents": 900000}, "edits.payload.amount_cents"),
        ({**ARGUMENTS, "amount_cents": "1"}, "edits.payload.amount_cents"),
    ],
)
def test_a_payload_changed_outside_the_edits_is_a_mismatch(payments, agent, rita, payload, words):
    action = approved(payments, agent, rita)
    Action.objects.filter(pk=action.pk).update(payload=payload)
    assert words in problem_of(action, agent)


def test_a_mismatch_is_audited(payments, agent, rita):
    action = approved(payments, agent, rita)
    services.refuse_mismatch(action, "payments", "because")
    event = AuditEvent.objects.get(event="gateway.payload_mismatch")
    assert (event.action_id, event.data["problem"]) == (action.pk, "because")
