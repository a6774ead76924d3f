"""A support agent on LangGraph that pauses for Impri with ``interrupt()`` (docs/agents.md).

The graph: ``propose`` (the model decides a refund for the ticket) → ``review`` (push it to
Impri, then ``interrupt()``: the thread is checkpointed and the run ends) → ``execute``
(resumed with Impri's decision: pay the *approved* payload through the stand-in processor of
``examples.refund_agent``, which checks Impri's grant, and report the result).

Whoever learns the decision resumes the thread with ``Command(resume=decision)``: here a
worker calling ``await_decision``; in production as well a webhook (``callback_url``,
checked with ``verify_webhook``). Everything before ``interrupt()`` runs again on resume: the
idempotency key makes the second push return the same action.

Without ``OPENAI_API_KEY`` a scripted model stands in for the LLM (the bot's own
``decide_refund``); with it (and ``pip install langchain-openai``), a real model
(``IMPRI_EXAMPLE_MODEL``, default gpt-4.1-mini) proposes the refund.
"""

from __future__ import annotations

import os
from typing import Any, TypedDict

from impri_client import Decision, Impri
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

from examples.refund_agent.agent import ProcessorRefused, decide_refund, pay, push_fields


class State(TypedDict, total=False):
    ticket: dict
    proposal: dict | None
    action_id: str
    outcome: dict


def real_model_proposal(ticket: dict) -> dict | None:
    """A real model's refund for the ticket (needs langchain-openai and OPENAI_API_KEY)."""
    from langchain_openai import ChatOpenAI
    from pydantic import BaseModel, Field

    class Refund(BaseModel):
        refund: bool = Field(description="whether the ticket calls for a refund")
        amount_cents: int = Field(description="the refund in cents (0 when none)")

    model = ChatOpenAI(model=os.environ.get("IMPRI_EXAMPLE_MODEL", "gpt-4.1-mini"))
    answer = model.with_structured_output(Refund).invoke(
        "Refund damaged items; give 10 % of the order as goodwill for late deliveries; no "
        f"refund for questions. Order total {ticket['order_total_cents']} cents. "
        f"Ticket ({ticket['category']}): {ticket['message']}"
    )
    if not answer.refund or answer.amount_cents <= 0:
        return None
    return {"order_id": ticket["order_id"], "amount_cents": answer.amount_cents,
            "currency": "USD", "ticket_id": ticket["id"]}  # fmt: skip


def build(impri: Impri, processor_url: str):
    """The compiled graph, checkpointed in memory (use a durable checkpointer in production)."""

    def propose(state: State) -> State:
        ticket = state["ticket"]
        use_model = os.environ.get("OPENAI_API_KEY")
        return {"proposal": real_model_proposal(ticket) if use_model else decide_refund(ticket)}

    def review(state: State) -> State:
        fields = push_fields(state["proposal"], state["ticket"])
        fields["idempotency_key"] = f"langgraph-{fields['idempotency_key']}"
        action = impri.push(kind="payment.refund", payload=state["proposal"], **fields)
        decision = interrupt({"impri_action_id": action.action_id, "inbox_url": action.inbox_url})
        return {"action_id": action.action_id, "outcome": {"decision": decision}}

    def execute(state: State) -> State:
        decision: dict[str, Any] = state["outcome"]["decision"]
        ticket, proposed = state["ticket"]["id"], state["proposal"]["amount_cents"]
        base = {"ticket": ticket, "proposed_cents": proposed}
        if decision["status"] != "approved":
            return {"outcome": {**base, "outcome": decision["status"], "note": decision["note"]}}
        approved = Decision.from_json(decision)
        try:
            receipt = pay(processor_url, approved.payload, approved)  # the approved payload only
        except ProcessorRefused as exc:
            impri.report_result(state["action_id"], status="failed", detail=str(exc))
            return {"outcome": {**base, "outcome": "refused by the processor", "error": str(exc)}}
        impri.report_result(
            state["action_id"], status="executed", detail=receipt, grant=approved.grant
        )
        return {"outcome": {**base, "outcome": "refunded", "refund": receipt}}

    def after_propose(state: State) -> str:
        return "review" if state["proposal"] else END

    builder = StateGraph(State)
    builder.add_node("propose", propose)
    builder.add_node("review", review)
    builder.add_node("execute", execute)
    builder.add_edge(START, "propose")
    builder.add_conditional_edges("propose", after_propose, ["review", END])
    builder.add_edge("review", "execute")
    builder.add_edge("execute", END)
    return builder.compile(checkpointer=InMemorySaver())


def run(impri: Impri, processor_url: str, tickets: list[dict], timeout_s: float | None) -> list:
    """Run every ticket to its interrupt (all pushed at once), then resume each as Impri decides."""
    graph = build(impri, processor_url)
    outcomes, paused = {}, {}
    for ticket in tickets:
        config = {"configurable": {"thread_id": ticket["id"]}}
        state = graph.invoke({"ticket": ticket}, config)
        if "__interrupt__" in state:
            paused[ticket["id"]] = (config, state["__interrupt__"][0].value["impri_action_id"])
        else:
            outcomes[ticket["id"]] = {"ticket": ticket["id"], "outcome": "no refund needed"}
    for ticket_id, (config, action_id) in paused.items():
        decision = impri.await_decision(action_id, timeout_s=timeout_s)  # a worker's part
        if decision.pending:
            outcomes[ticket_id] = {"ticket": ticket_id, "outcome": "still pending"}
            continue
        state = graph.invoke(Command(resume=decision.raw), config)
        outcomes[ticket_id] = state["outcome"]
    return [outcomes[t["id"]] for t in tickets]
