"""Money edits are bounded by default: a reviewer can lower a refund, never raise, invert or zero it.

Money fields are the action's amounts (its kind's declaration, else the
detector: rules.money). Without a rule bound an editable one keeps
``0 < value <= original``; rules may widen or narrow that; the agent may narrow
it at push (``editable: [{path, min, max}]``), never widen it; and an edit never
breaks what the kind declares (a positive integer in minor units).
"""

from __future__ import annotations

import pytest

from approvals.models import Action, ActionStatus
from tests.conftest import make_reviewer
from tests.factories import install_rules, make_action, refund_body

AMOUNT = "payload.amount_cents"
# order.update declared as moving no money: its numbers flow as before the closed world.
MOVES_NO_MONEY = "rules: []\nkinds: {order.update: {money: []}}"


def approve(persona, action_id: str, **edits):
    return persona.client().post(f"/actions/{action_id}/approve", {"edits": edits})


def approve_amount(persona, action_id: str, amount):
    return persona.client().post(f"/actions/{action_id}/approve", {"edits": {AMOUNT: amount}})


def push(agent, **overrides):
    return agent.client().post("/actions", refund_body(**overrides))


@pytest.mark.parametrize(
    ("amount", "words"),
    [
        (999999, "at most 8400"),
        (8401, "at most 8400"),
        (-500000, "at least 1"),
        (0, "at least 1"),
        (2**63, "at most 8400"),
        (2**70, "below 10^21"),  # not even a storable number
    ],
    ids=["raise", "raise-by-a-cent", "invert", "zero", "2^63", "2^70"],
)
def test_without_a_rule_an_amount_cannot_be_raised_inverted_or_zeroed(agent, rita, amount, words):
    action = make_action(agent.agent)
    response = approve_amount(rita, action.pk, amount)
    assert response.status_code == 422, response.content
    assert response.json()["field"] == f"edits.{AMOUNT}"
    assert words in response.json()["detail"]
    action.refresh_from_db()
    assert (action.status, action.payload["amount_cents"]) == (ActionStatus.PENDING, 8400)


@pytest.mark.parametrize("amount", [5000, 1, 8400])
def test_without_a_rule_an_amount_can_be_lowered(agent, rita, amount):
    action = make_action(agent.agent)
    response = approve_amount(rita, action.pk, amount)
    assert response.status_code == 200, response.content
    action.refresh_from_db()
    assert (action.status, action.payload["amount_cents"]) == (ActionStatus.APPROVED, amount)


def test_the_bounds_are_shown_with_the_action(agent, rita):
    body = push(agent).json()
    assert body["edit_bounds"] == {AMOUNT: {"min": 1, "max": "original"}}
    assert rita.client().get(f"/actions/{body['action_id']}").json()["edit_bounds"] == {
        AMOUNT: {"min": 1, "max": "original"}
    }


def test_a_refund_pushed_at_zero_or_below_is_refused_naming_the_path(agent):
    for amount in (0, -500):
        response = push(agent, payload={"amount_cents": amount, "currency": "USD"})
        assert response.status_code == 422, response.content
        assert response.json()["field"] == AMOUNT
        assert "must be a positive integer in minor units" in response.json()["detail"]
    assert not Action.objects.exists()


def test_other_numbers_have_no_default_bound(agent, rita):
    install_rules(MOVES_NO_MONEY)  # an undeclared kind's numbers may not rise (test_money_closed)
    action = make_action(
        agent.agent,
        kind="order.update",
        payload={"qty": 2, "total": 12.5},
        editable=["payload.qty", "payload.total"],
    )
    response = approve(rita, action.pk, **{"payload.qty": 900, "payload.total": -3.5})
    assert response.status_code == 200, response.content


def test_a_cents_field_written_as_text_is_money_and_no_edit_passes_its_bound(agent, rita):
    action = make_action(
        agent.agent,
        kind="billing.fee",
        payload={"fee_cents": "12", "currency": "USD"},
        editable=["payload.fee_cents"],
    )
    assert action.edit_bounds == {"payload.fee_cents": {"min": 1, "max": "original"}}
    response = approve(rita, action.pk, **{"payload.fee_cents": "1200"})
    assert response.status_code == 422, response.content
    assert response.json()["field"] == "edits.payload.fee_cents"


class TestRuleBounds:
    def use(self, bounds: str) -> None:
        install_rules(
            "rules: [{name: refunds, kind: payment.refund, then: review, "
            f"edit_bounds: {{payload.amount_cents: {bounds}}}}}]"
        )

    def test_a_rule_may_widen_the_maximum_and_keeps_the_default_minimum(self, agent, rita, sam):
        self.use("{max: 20000}")
        raised = make_action(agent.agent)
        assert approve_amount(rita, raised.pk, 15000).status_code == 200
        zeroed = make_action(agent.agent)
        assert approve_amount(sam, zeroed.pk, 0).status_code == 422

    def test_a_rule_may_narrow(self, agent, rita):
        self.use("{min: 5000}")
        action = make_action(agent.agent)
        response = approve_amount(rita, action.pk, 4000)
        assert response.status_code == 422
        assert "at least 5000" in response.json()["detail"]
        assert approve_amount(rita, action.pk, 9000).status_code == 422  # default max kept
        assert approve_amount(rita, action.pk, 6000).status_code == 200

    def test_a_rule_may_lift_a_limit_with_null(self, agent, rita):
        install_rules(
            "rules: [{name: adjustments, kind: ledger.adjust, then: review, "
            "edit_bounds: {payload.amount_cents: {min: null, max: original}}}]\n"
            "kinds: {ledger.adjust: {money: [{amount: payload.amount_cents, currency: USD, "
            "sign: any}]}}"
        )
        action = make_action(agent.agent, kind="ledger.adjust")
        assert approve_amount(rita, action.pk, -100).status_code == 200

    def test_a_lifted_limit_still_keeps_what_the_kind_declares(self, agent, rita):
        self.use("{min: null, max: original}")
        action = make_action(agent.agent)
        refused = approve_amount(rita, action.pk, -100)
        assert refused.status_code == 422, refused.content
        assert refused.json()["field"] == f"edits.{AMOUNT}"
        assert "positive integer in minor units" in refused.json()["detail"]


class TestPushBounds:
    def test_the_agent_narrows_the_default(self, agent, rita):
        response = push(agent, editable=[{"path": AMOUNT, "min": 4000, "max": 8000}])
        assert response.status_code == 201, response.content
        action_id = response.json()["action_id"]
        assert response.json()["edit_bounds"] == {AMOUNT: {"min": 4000, "max": 8000}}
        assert response.json()["editable"] == [AMOUNT]
        for amount, words in ((8100, "at most 8000"), (3000, "at least 4000")):
            refused = approve_amount(rita, action_id, amount)
            assert refused.status_code == 422
            assert words in refused.json()["detail"]
        assert approve_amount(rita, action_id, 5000).status_code == 200

    def test_the_agent_cannot_widen_the_default(self, agent, rita):
        response = push(agent, editable=[{"path": AMOUNT, "min": -100, "max": 20000}])
        action_id = response.json()["action_id"]
        assert response.json()["edit_bounds"] == {AMOUNT: {"min": 1, "max": "original"}}
        assert approve_amount(rita, action_id, 9000).status_code == 422
        assert approve_amount(rita, action_id, 0).status_code == 422

    def test_the_agent_cannot_widen_a_rule(self, agent, rita, db):
        install_rules(
            "rules: [{name: refunds, kind: payment.refund, then: review, "
            "edit_bounds: {payload.amount_cents: {min: 2000, max: 9000}}}]"
        )
        body = push(agent, editable=[{"path": AMOUNT, "min": 1000, "max": 8500}]).json()
        assert body["edit_bounds"] == {AMOUNT: {"min": 2000, "max": 8500}}

    def test_a_bound_on_a_number_without_a_default(self, agent, rita):
        install_rules(MOVES_NO_MONEY)
        body = push(
            agent,
            kind="order.update",
            payload={"qty": 2},
            editable=[{"path": "payload.qty", "min": 1, "max": 3}],
        ).json()
        assert approve(rita, body["action_id"], **{"payload.qty": 4}).status_code == 422
        assert approve(rita, body["action_id"], **{"payload.qty": 3}).status_code == 200

    @pytest.mark.parametrize(
        ("editable", "words"),
        [
            ([{"path": AMOUNT, "min": 9000, "max": 100}], "min must not be above max"),
            ([{"path": AMOUNT, "max": "lots"}], "must be a number or original"),
            ([{"path": AMOUNT, "max": True}], "must be a number or original"),
            ([{"path": "payload.currency", "max": 3}], "not a number"),
            ([{"path": AMOUNT, "ceiling": 3}], "ceiling"),
            ([AMOUNT, {"path": AMOUNT, "max": 10}], "listed once"),
        ],
    )
    def test_a_bad_bound_is_a_422(self, agent, editable, words):
        response = push(agent, editable=editable)
        assert response.status_code == 422, response.content
        assert words in response.json()["detail"]
        assert "editable" in response.json()["detail"]
        assert not Action.objects.exists()


def test_the_push_records_the_bounds_in_the_audit(agent):
    from audit.models import AuditEvent

    action = make_action(agent.agent, editable=[{"path": AMOUNT, "max": 8000}])
    event = AuditEvent.objects.get(action_id=action.pk, event="action.pushed")
    assert event.data["edit_bounds"] == {AMOUNT: {"min": 1, "max": 8000}}


def test_a_reviewer_in_the_inbox_is_held_to_the_default(agent, client, db):
    reviewer = make_reviewer("rosa", "reviewers")
    install_rules("rules: [{name: r, kind: payment.refund, then: review, group: reviewers}]")
    action = make_action(agent.agent)
    client.force_login(reviewer.user)
    response = client.post(
        f"/inbox/actions/{action.pk}/decide",
        {"approve-verdict": "approve", f"approve-{AMOUNT}": "999999", "approve-note": ""},
    )
    assert response.status_code == 422
    assert "must be at most 8400" in response.content.decode()
    action.refresh_from_db()
    assert (action.status, action.payload["amount_cents"]) == (ActionStatus.PENDING, 8400)
