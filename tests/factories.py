"""Plain helpers that build test data through the service layer."""

from __future__ import annotations

import copy

from approvals import services
from approvals.models import Action, Agent
from approvals.schemas import ActionIn

# The seed's example: an agent proposes refunding $84 on order 10432.
REFUND = {
    "kind": "payment.refund",
    "title": "Refund $84.00 on order 10432",
    "preview": {
        "format": "markdown",
        "body": "Customer reports a damaged item. Refund **$84.00** to the card on file.",
    },
    "payload": {"order_id": "10432", "amount_cents": 8400, "currency": "USD", "reason": "damaged"},
    "target_url": "https://shop.example.com/admin/orders/10432",
    "editable": ["payload.amount_cents"],
    "context": {"customer_message": "The mug arrived broken.", "order_total_cents": 8400},
}


def refund_body(**overrides) -> dict:
    body = copy.deepcopy(REFUND)
    body.update(overrides)
    return body


def make_action(agent: Agent, **overrides) -> Action:
    action, _ = services.push_action(agent, ActionIn(**refund_body(**overrides)))
    return action


# The rules example of docs/rules.md, as a team would write it.
SEED_RULES = """
rules:
  - name: small refunds
    kind: payment.refund
    when: {all: [{path: payload.amount_cents, lte: 5000}, {not: {path: flags, contains: policy_exception}}]}
    then: auto_approve
    budget: {per: day, sum: payload.amount_cents, max: 50000}
  - name: absurd refunds
    kind: payment.refund
    when: {path: payload.amount_cents, gt: 1000000}
    then: auto_reject
    reason: above the hard cap for agent refunds
  - name: everything else in payments
    kind: payment.*
    then: review
    group: support-leads
    edit_bounds: {payload.amount_cents: {min: 1, max: original}}
    approvals_required: 1
    expires_in_s: 86400
"""


def install_rules(text: str = SEED_RULES) -> int:
    from rules import services as rule_services

    return rule_services.replace_rules(rule_services.parse_file(text), by="cli", create_groups=True)


def refund(amount_cents: int, **overrides) -> dict:
    body = refund_body(**overrides)
    body["payload"] = {**body["payload"], "amount_cents": amount_cents}
    body["title"] = f"Refund ${amount_cents / 100:.2f} on order 10432"
    return body
