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
    "preview": {"format": "markdown", "body": "Customer reports a damaged item. Refund **$84.00** to the card on file."},
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
