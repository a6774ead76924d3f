"""A small support bot: reads tickets, decides refunds, and asks Impri before paying.

The bot's judgement is deliberately imperfect (as an LLM's would be): a
customer who threatens enough gets the full amount they ask for. Impri's
reviewer is the one who catches that, and the payment processor only pays
what the reviewer approved.
"""

from __future__ import annotations

import json
import logging
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
from impri_client import (
    ActionNotApproved,
    AlreadySettled,
    Decision,
    DecisionTimeout,
    Impri,
    gated,
)

logger = logging.getLogger("refund_agent")

TICKETS = Path(__file__).with_name("tickets.json")
# Late deliveries get this share of the order back as goodwill.
GOODWILL_SHARE = 0.10


class ProcessorRefused(Exception):
    """The payment processor said no; the action is reported ``failed`` with this."""


def load_tickets(path: Path = TICKETS) -> list[dict]:
    return json.loads(path.read_text())


def decide_refund(ticket: dict) -> dict | None:
    """The refund the bot proposes for a ticket (its payload), or None for no refund."""
    total = ticket["order_total_cents"]
    if ticket["category"] == "damaged":
        # The flaw Impri is there for: a forceful customer gets what they claim.
        forceful = "lawyer" in ticket["message"].lower()
        amount = ticket["claimed_cents"] if forceful else min(ticket["claimed_cents"], total)
    elif ticket["category"] == "late":
        amount = round(total * GOODWILL_SHARE)
    else:
        return None
    return {
        "order_id": ticket["order_id"],
        "amount_cents": amount,
        "currency": "USD",
        "ticket_id": ticket["id"],
    }


def _preview(payload: dict, ticket: dict) -> dict:
    over = payload["amount_cents"] > ticket["order_total_cents"]
    lines = [
        f"Refund **${payload['amount_cents'] / 100:.2f}** on order {payload['order_id']} "
        f"(order total ${ticket['order_total_cents'] / 100:.2f}).",
        f"Ticket {ticket['id']} ({ticket['category']}) from {ticket['customer']}.",
    ]
    if over:
        lines.append("**The refund is larger than the order.**")
    return {"format": "markdown", "body": "\n\n".join(lines)}


def push_fields(payload: dict, ticket: dict) -> dict:
    flags = ["policy_exception"] if payload["amount_cents"] > ticket["order_total_cents"] else []
    return {
        "title": f"Refund ${payload['amount_cents'] / 100:.2f} on order {payload['order_id']}",
        "preview": _preview(payload, ticket),
        "editable": ["payload.amount_cents"],
        "flags": flags,
        "context": {
            "customer_message": ticket["message"],
            "order_total_cents": ticket["order_total_cents"],
        },
        "idempotency_key": f"refund-{ticket['id']}",
    }


def pay(processor_url: str, payload: dict, decision: Decision) -> dict:
    """Ask the processor to refund exactly the approved payload, showing Impri's grant."""
    response = httpx.post(
        processor_url + "/v1/refunds",
        json={"action_id": decision.action_id, "payload": payload, "grant": decision.grant},
        timeout=30,
    )
    if response.status_code != 201:
        raise ProcessorRefused(response.json().get("error", response.text))
    return response.json()


def handle(impri: Impri, processor_url: str, ticket: dict, timeout_s: float | None) -> dict:
    """One ticket from decision to result; answers what happened, for the log."""
    proposed = decide_refund(ticket)
    outcome = {"ticket": ticket["id"], "proposed_cents": proposed and proposed["amount_cents"]}
    if proposed is None:
        return {**outcome, "outcome": "no refund needed"}

    @gated(impri, kind="payment.refund", timeout_s=timeout_s, **push_fields(proposed, ticket))
    def refund(payload: dict, decision: Decision) -> dict:
        return pay(processor_url, payload, decision)

    try:
        receipt = refund(proposed)
    except ActionNotApproved as exc:
        return {**outcome, "outcome": exc.status, "note": exc.note, "reason": exc.reason}
    except AlreadySettled as exc:
        return {**outcome, "outcome": f"already {exc.status} earlier"}
    except DecisionTimeout:
        return {**outcome, "outcome": "still pending"}
    except ProcessorRefused as exc:
        return {**outcome, "outcome": "refused by the processor", "error": str(exc)}
    return {**outcome, "outcome": "refunded", "refund": receipt}


def run(
    impri: Impri,
    processor_url: str,
    tickets: list[dict],
    timeout_s: float | None = None,
) -> list[dict]:
    """Handle every ticket at once (each waits for its own decision); outcomes in ticket order."""
    with ThreadPoolExecutor(max_workers=max(len(tickets), 1)) as pool:
        futures = [pool.submit(handle, impri, processor_url, t, timeout_s) for t in tickets]
        outcomes = []
        for future in futures:
            outcome = future.result()
            logger.info("%s", json.dumps(outcome))
            outcomes.append(outcome)
    return outcomes
