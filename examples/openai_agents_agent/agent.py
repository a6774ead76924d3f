"""A support agent on the OpenAI Agents SDK whose refund tool waits on Impri (docs/agents.md).

The model proposes the refund's arguments; the tool pushes them to Impri with ``gated`` and
runs only with what a reviewer approved (maybe a lower amount), paying through the stand-in
processor of ``examples.refund_agent``, which checks Impri's grant; then it tells the model
what happened, a reviewer's note included.

Without ``OPENAI_API_KEY`` a scripted model stands in for the LLM (no network, no key):
it calls ``refund`` with the bot's own proposal (``decide_refund``), then repeats what the
tool answered. With the key set, a real model (``IMPRI_EXAMPLE_MODEL``, default
gpt-4.1-mini) reads the ticket and decides.
"""

from __future__ import annotations

import asyncio
import json
import os

from agents import Agent, Model, ModelResponse, Runner, function_tool, set_tracing_disabled
from agents.usage import Usage
from impri_client import ActionNotApproved, AsyncImpri, DecisionTimeout, gated
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from examples.refund_agent.agent import ProcessorRefused, decide_refund, pay, push_fields

INSTRUCTIONS = (
    "You resolve customer support tickets for a shop. Refund damaged items and give 10 % of "
    "the order as goodwill for late deliveries, with the refund tool; answer questions without "
    "refunding. Say in one sentence what you did."
)


class ScriptedModel(Model):
    """Stands in for an LLM: proposes ``decide_refund``'s refund, then says what the tool answered."""

    def __init__(self, ticket: dict):
        self.ticket = ticket

    async def get_response(self, system_instructions, input, *args, **kwargs) -> ModelResponse:
        items = input if isinstance(input, list) else []
        answers = [
            i for i in items if isinstance(i, dict) and i.get("type") == "function_call_output"
        ]
        proposal = decide_refund(self.ticket)
        if answers or proposal is None:
            text = answers[-1]["output"] if answers else "No refund needed: answered the question."
            output = ResponseOutputMessage(
                id="msg_1", type="message", role="assistant", status="completed",
                content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
            )  # fmt: skip
        else:
            arguments = {k: proposal[k] for k in ("order_id", "amount_cents", "ticket_id")}
            output = ResponseFunctionToolCall(
                id="fc_1", call_id=f"call_{self.ticket['id']}", type="function_call",
                name="refund", arguments=json.dumps(arguments), status="completed",
            )  # fmt: skip
        return ModelResponse(output=[output], usage=Usage(), response_id=None)

    def stream_response(self, *args, **kwargs):
        raise NotImplementedError("the scripted model does not stream")


def model_for(ticket: dict) -> Model | str:
    if os.environ.get("OPENAI_API_KEY"):
        return os.environ.get("IMPRI_EXAMPLE_MODEL", "gpt-4.1-mini")
    set_tracing_disabled(True)
    return ScriptedModel(ticket)


async def handle(
    impri: AsyncImpri, processor_url: str, ticket: dict, timeout_s: float | None
) -> dict:
    """One ticket: the agent runs; its refund tool goes through Impri. Answers the outcome."""
    outcome: dict = {"ticket": ticket["id"], "outcome": "no refund needed"}

    @function_tool
    async def refund(order_id: str, amount_cents: int, ticket_id: str) -> str:
        """Refund an order, in cents. A human reviews it first and may lower the amount."""
        proposal = {"order_id": order_id, "amount_cents": amount_cents, "currency": "USD",
                    "ticket_id": ticket_id}  # fmt: skip
        outcome["proposed_cents"] = amount_cents
        fields = push_fields(proposal, ticket)
        fields["idempotency_key"] = f"openai-agents-{fields['idempotency_key']}"

        @gated(impri, kind="payment.refund", timeout_s=timeout_s, **fields)
        async def execute(payload, decision):
            return await asyncio.to_thread(pay, processor_url, payload, decision)

        try:
            receipt = await execute(proposal)
        except ActionNotApproved as exc:
            outcome.update(outcome=exc.status, note=exc.note)
            return f"Not refunded: {exc.status}. Reviewer's note: {exc.note or 'none'}."
        except DecisionTimeout:
            outcome.update(outcome="still pending")
            return "The refund is waiting for a reviewer."
        except ProcessorRefused as exc:
            outcome.update(outcome="refused by the processor", error=str(exc))
            return f"The processor refused the refund: {exc}"
        outcome.update(outcome="refunded", refund=receipt)
        return f"Refunded {receipt['amount_cents']} cents (id {receipt['refund_id']})."

    agent = Agent(
        name="Support", instructions=INSTRUCTIONS, tools=[refund], model=model_for(ticket)
    )
    result = await Runner.run(
        agent, f"Ticket {ticket['id']} from {ticket['customer']}: {ticket['message']}"
    )
    outcome["said"] = result.final_output
    return outcome
