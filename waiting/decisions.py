"""The wait every agent door shares: on this process's hub, answered on the database lanes.

The REST route, the long-poll's consumer, the MCP tool and the gateway each parse their own
input and shape their own error; the wait (``approvals.services.await_decision``, the rules)
and the decision's answer (``approvals.presenters.decision_out`` on the lane the wait says)
are these two calls.
"""

from __future__ import annotations

from approvals import services
from approvals.models import Action
from approvals.presenters import decision_out
from plumbing.database import database_sync_to_async

from .hub import hub

_decision_out = {lane: database_sync_to_async(decision_out, lane) for lane in ("work", "wake")}


async def wait_for_decision(action_id: str, *, agent, timeout_s: float, **options) -> Action:
    """``services.await_decision`` watched by this process's hub (``options``: progress)."""
    return await services.await_decision(
        action_id, agent=agent, timeout_s=timeout_s, watch=hub().watch, **options
    )


async def decision_answer(action: Action) -> dict:
    """The decision as agents read it, built on the lane a woken or timed-out wait takes."""
    return await _decision_out[services.answer_lane(action)](action)
