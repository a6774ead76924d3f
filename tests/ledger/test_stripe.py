"""Stripe's webhook, signed in the test with Stripe's scheme, and every state it leads to
(run on SQLite and on PostgreSQL + Redis: the suite's two legs)."""

from __future__ import annotations

import time

import pytest

from approvals import services
from audit.models import AuditEvent
from ledger.models import Movement, ProcessorEvent, Settlement
from tests.factories import make_action, refund

from .helpers import approved_refund, deliver, event, executed, refund_obj

pytestmark = pytest.mark.django_db


def _state(action) -> str:
    return Settlement.objects.get(action=action).state


def _tagged(action, re_id: str, amount: int, **extra) -> dict:
    return refund_obj(re_id, amount, metadata={"impri_action_id": action.pk}, **extra)


def test_matched_by_metadata_after_the_agent_reported(agent, lead):
    action = approved_refund(agent.agent, lead.user)
    executed(action, agent.agent)
    response = deliver(event("refund.created", _tagged(action, "re_ok", 8400)))
    assert response.status_code == 200, response.content
    assert response.json() == {"received": "recorded", "movements": 1}
    assert _state(action) == "matched"
    movement = Movement.objects.get(external_id="re_ok")
    assert (movement.state, movement.matched_by, movement.amount_minor) == (
        "matched",
        "metadata",
        8400,
    )
    events = list(
        AuditEvent.objects.filter(event__startswith="ledger.").values_list("event", flat=True)
    )
    assert events == ["ledger.movement_recorded", "ledger.matched"]
    matched = AuditEvent.objects.get(event="ledger.matched")
    assert matched.action_id == action.pk
    assert matched.data["approved"] == {"USD": 8400} and matched.data["moved"] == {"USD": 8400}


def test_matched_by_the_reported_reference(agent, lead):
    action = approved_refund(agent.agent, lead.user)
    executed(action, agent.agent, reference="re_by_ref")
    deliver(event("refund.created", refund_obj("re_by_ref", 8400)))
    movement = Movement.objects.get(external_id="re_by_ref")
    assert (movement.action_id, movement.matched_by, movement.state) == (
        action.pk,
        "reference",
        "matched",
    )


def test_mismatch_another_amount_both_shown(agent, lead):
    action = approved_refund(agent.agent, lead.user)
    executed(action, agent.agent)
    deliver(event("refund.created", _tagged(action, "re_big", 9400)))
    assert _state(action) == "mismatch"
    exception = AuditEvent.objects.get(event="ledger.exception")
    assert exception.data["approved"] == {"USD": 8400}
    assert exception.data["moved"] == {"USD": 9400}
    assert exception.data["state"] == "mismatch"


def test_mismatch_another_currency(agent, lead):
    action = approved_refund(agent.agent, lead.user)
    executed(action, agent.agent)
    deliver(event("refund.created", _tagged(action, "re_eur", 8400, currency="eur")))
    assert _state(action) == "mismatch"


def test_unapproved_without_any_action(db):
    deliver(event("refund.created", refund_obj("re_nobody", 5000)))
    movement = Movement.objects.get(external_id="re_nobody")
    assert movement.action_id is None and movement.state == "unapproved"
    assert AuditEvent.objects.filter(event="ledger.exception").count() == 1


def test_unapproved_for_a_rejected_action(agent, lead):
    install = approved_refund  # the rules, installed by the helper
    del install
    from tests.factories import install_rules

    install_rules()
    action = make_action(agent.agent, **refund(8400))
    services.decide(action.pk, by=lead.user, verdict="reject", note="no")
    deliver(event("refund.created", _tagged(action, "re_rejected", 8400)))
    assert _state(action) == "unapproved"


def test_duplicate_two_refunds_past_the_approval(agent, lead):
    action = approved_refund(agent.agent, lead.user)
    executed(action, agent.agent)
    deliver(event("refund.created", _tagged(action, "re_one", 8400)))
    assert _state(action) == "matched"
    deliver(event("refund.created", _tagged(action, "re_two", 8400)))
    assert _state(action) == "duplicate"
    assert set(Movement.objects.values_list("state", flat=True)) == {"duplicate"}


def test_unreported_money_moved_agent_silent(agent, lead):
    action = approved_refund(agent.agent, lead.user)
    deliver(event("refund.created", _tagged(action, "re_silent", 8400)))
    assert _state(action) == "unreported"
    # The agent reports later: the sweep settles it again.
    executed(action, agent.agent)
    from ledger import services as ledger

    ledger.sweep()
    assert _state(action) == "matched"


def test_charge_refunded_with_two_refunds_is_two_movements(agent, lead):
    action = approved_refund(agent.agent, lead.user)
    executed(action, agent.agent)
    charge = {
        "id": "ch_two",
        "object": "charge",
        "amount": 20000,
        "currency": "usd",
        "metadata": {},
        "refunds": {
            "object": "list",
            "data": [
                _tagged(action, "re_part1", 4000, charge="ch_two"),
                _tagged(action, "re_part2", 4400, charge="ch_two"),
            ],
        },
    }
    assert deliver(event("charge.refunded", charge)).json()["movements"] == 2
    assert Movement.objects.filter(external_id__startswith="re_part").count() == 2
    assert _state(action) == "matched"
    # The same refunds told again one by one: still two movements.
    deliver(event("refund.updated", _tagged(action, "re_part1", 4000, charge="ch_two")))
    assert Movement.objects.count() == 2


def test_a_replayed_event_is_recorded_once(agent, lead):
    action = approved_refund(agent.agent, lead.user)
    executed(action, agent.agent)
    body = event("refund.created", _tagged(action, "re_replay", 8400), event_id="evt_same")
    assert deliver(body).json()["received"] == "recorded"
    assert deliver(body).json()["received"] == "replay"
    assert Movement.objects.count() == 1
    assert ProcessorEvent.objects.filter(event_id="evt_same").count() == 1
    assert AuditEvent.objects.filter(event="ledger.movement_recorded").count() == 1


def test_out_of_order_refund_updated_keeps_the_latest(agent, lead):
    action = approved_refund(agent.agent, lead.user)
    executed(action, agent.agent)
    now = int(time.time())
    failed = _tagged(action, "re_late", 8400, status="failed")
    pending = _tagged(action, "re_late", 8400, status="pending")
    deliver(event("refund.failed", failed, created=now))
    deliver(event("refund.updated", pending, created=now - 60))  # older, arrives later
    movement = Movement.objects.get(external_id="re_late")
    assert movement.processor_status == "failed"
    # A failed refund moved nothing: the action is not matched by it.
    assert _state(action) != "matched"


def test_forged_signature_is_400(db):
    body = event("refund.created", refund_obj("re_forged", 100))
    response = deliver(body, secret="whsec_someone_else")
    assert response.status_code == 400
    assert response.json()["field"] == "Stripe-Signature"
    assert deliver(body, header="t=1,v1=00").status_code == 400
    assert deliver(body, header="").status_code == 400
    assert not Movement.objects.exists()


def test_stale_signature_is_400(db):
    body = event("refund.created", refund_obj("re_stale", 100))
    assert deliver(body, at=int(time.time()) - 301).status_code == 400
    assert deliver(body, at=int(time.time()) - 200).status_code == 200


def test_the_older_secret_still_verifies_while_rotating(db):
    body = event("refund.created", refund_obj("re_rotated", 100))
    assert deliver(body, secret="whsec_old_one").status_code == 200


def test_ignored_event_types_are_200(db):
    response = deliver(event("customer.created", {"id": "cus_1", "object": "customer"}))
    assert response.status_code == 200 and response.json()["received"] == "ignored"
    assert not Movement.objects.exists()


def test_charge_and_its_payment_intent_are_one_movement(db):
    intent = {
        "id": "pi_1",
        "object": "payment_intent",
        "amount": 500,
        "amount_received": 500,
        "currency": "usd",
        "latest_charge": "ch_9",
        "metadata": {},
    }
    charge = {
        "id": "ch_9",
        "object": "charge",
        "amount": 500,
        "currency": "usd",
        "payment_intent": "pi_1",
        "metadata": {},
    }
    deliver(event("payment_intent.succeeded", intent))
    deliver(event("charge.succeeded", charge))
    assert list(Movement.objects.values_list("external_id", "kind")) == [("pi_1", "charge")]


def test_the_action_read_carries_its_reconciliation(agent, lead):
    action = approved_refund(agent.agent, lead.user)
    executed(action, agent.agent, reference="re_read")
    deliver(event("refund.created", refund_obj("re_read", 8400)))
    body = agent.client().get(f"/actions/{action.pk}").json()
    assert body["result"]["reference"] == "re_read"
    rec = body["reconciliation"]
    assert rec["state"] == "matched"
    assert rec["movements"][0]["id"] == "re_read"
    assert set(rec["movements"][0]) == {
        "id",
        "source",
        "kind",
        "amount_minor",
        "currency",
        "occurred_at",
        "state",
    }
