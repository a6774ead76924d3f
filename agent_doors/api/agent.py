"""The agent's routes: push, read, await the decision, report, cancel, list."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Literal

from ninja import Field, Query, Router, Schema, Status

from approvals import services
from approvals.errors import InvalidInput
from approvals.models import Action
from approvals.presenters import action_out
from approvals.schemas import (
    NO_NUL,
    ActionIn,
    ActionOut,
    ActionPage,
    CancelIn,
    DecisionOut,
    ResultIn,
)
from approvals.services import selectors
from approvals.services.waiting import DEFAULT_AWAIT_S
from identity import keys
from waiting import decisions

from .common import (
    CURSOR_RE,
    ERRORS,
    IDEMPOTENCY_HEADER,
    ActionId,
    AsyncKeyAuth,
    _agent,
    _base,
    _key,
    _read,
)

router = Router(tags=["actions"])


TIMEOUT_S_DESCRIPTION = (
    "Seconds to wait for a decision (0: just look); capped by IMPRI_MAX_AWAIT_S."
)


@router.post("/actions", response={200: ActionOut, 201: ActionOut, **ERRORS})
def push_action(request, data: ActionIn, idempotency_key: str | None = IDEMPOTENCY_HEADER):
    """Propose an action. 201 when created, 200 with the same body when an Idempotency-Key is replayed."""
    action, created = services.push_action(
        _agent(request), data, idempotency_key=_key(idempotency_key)
    )
    return Status(201 if created else 200, action_out(action, _base(request)))


@router.get("/actions/{action_id}", response={200: ActionOut, **ERRORS})
def get_action(request, action_id: ActionId):
    return action_out(_read(request, action_id), _base(request), reconciliation=True)


@router.get(
    "/actions/{action_id}/decision", response={200: DecisionOut, **ERRORS}, auth=AsyncKeyAuth()
)
async def await_decision(
    request,
    action_id: ActionId,
    timeout_s: float = Query(DEFAULT_AWAIT_S, ge=0, description=TIMEOUT_S_DESCRIPTION),
):
    """Long-poll: answers as soon as the action is decided, else with status pending after timeout_s.

    While it waits it holds no thread and no database connection (see
    ``approvals.services.waiting``); on shutdown it answers pending at once: call again.
    A server routes this path to the long-poll's consumer (``waiting.consumers``), which
    answers the same; this view serves it where Django alone does (the test client).
    """
    principal: keys.Principal = request.auth
    agent = services.waiter(principal.agent)
    action = await decisions.wait_for_decision(action_id, agent=agent, timeout_s=timeout_s)
    return await decisions.decision_answer(action)


@router.post("/actions/{action_id}/result", response={200: ActionOut, **ERRORS})
def report_result(request, action_id: ActionId, data: ResultIn):
    action = services.report_result(
        action_id,
        agent=_agent(request),
        status=data.status,
        detail=data.detail,
        grant=data.grant,
        reference=data.reference,
    )
    return action_out(action, _base(request))


@router.post("/actions/{action_id}/cancel", response={200: ActionOut, **ERRORS})
def cancel_action(request, action_id: ActionId, data: CancelIn | None = None):
    reason = data.reason if data else ""
    return action_out(
        services.cancel_action(action_id, agent=_agent(request), reason=reason), _base(request)
    )


class ListFilters(Schema):
    status: (
        Literal[
            "pending",
            "approved",
            "rejected",
            "changes_requested",
            "expired",
            "cancelled",
            "executed",
            "failed",
        ]
        | None
    ) = None
    kind: str | None = Field(None, json_schema_extra={"pattern": NO_NUL})
    agent: str | None = Field(None, json_schema_extra={"pattern": NO_NUL})
    cursor: str | None = Field(
        None,
        description="`next_cursor` of the previous page.",
        json_schema_extra={"pattern": CURSOR_RE.pattern},
    )
    limit: int = Field(50, ge=1, le=200)


@router.get("/actions", response={200: ActionPage, **ERRORS})
def list_actions(request, filters: Query[ListFilters]):
    """Newest first. Agents see their own actions; reviewers those routed to their groups."""
    principal: keys.Principal = request.auth
    qs = selectors.filtered(
        selectors.listed_for(agent=principal.agent, user=principal.user),
        selectors.Filters(
            status=filters.status or "", kind=filters.kind or "", agent=filters.agent or ""
        ),
        principal.user,
    )
    position = _decode_cursor(filters.cursor) if filters.cursor is not None else None
    page, more = selectors.keyset(qs, "newest", position, filters.limit)
    base = _base(request)
    return {
        "items": [action_out(action, base) for action in page],
        "next_cursor": _encode_cursor(page[-1]) if more else None,
    }


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MICROSECOND = timedelta(microseconds=1)


def _encode_cursor(action: Action) -> str:
    return f"{(action.created_at - EPOCH) // MICROSECOND}_{action.pk}"


def _decode_cursor(cursor: str) -> tuple[datetime, str]:
    """Any cursor of the documented shape is a position (before 2286), so none is refused."""
    match = CURSOR_RE.fullmatch(cursor)
    if not match:
        raise InvalidInput("cursor", "is not a cursor returned by this endpoint")
    return EPOCH + int(match.group(1)) * MICROSECOND, match.group(2)
