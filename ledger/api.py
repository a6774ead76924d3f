"""REST: ``POST /api/v1/ledger/movements`` (a service token records what any processor moved)
and ``GET /api/v1/ledger/movements?state=`` (reviewers read them). Registered on the API by the roof
(impri/urls.py); errors are that API's envelopes."""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any, Literal

from ninja import Query, Router, Status
from pydantic import BaseModel, ConfigDict, Field, field_validator

from approvals.errors import Forbidden
from approvals.money import iso_currency
from approvals.presenters import unix
from approvals.schemas import ErrorOut

from . import selectors, services
from .models import Movement

router = Router(tags=["reconciliation"])


class MovementIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1, max_length=255, pattern=r"^[\x21-\x7e]+$")
    kind: Literal["refund", "charge"]
    amount_minor: int = Field(gt=0, le=2**53 - 1, strict=True)
    currency: str
    occurred_at: dt.datetime = Field(
        description="Unix seconds, or an ISO 8601 time with its offset."
    )
    reference: str | None = Field(default=None, max_length=255)
    action_id: str | None = Field(default=None, max_length=40)
    metadata: dict[str, Any] | None = None

    @field_validator("currency")
    @classmethod
    def _currency(cls, value: str) -> str:
        if not iso_currency(value):
            raise ValueError(f"currency: {value!r} is not an ISO 4217 code")
        return value.upper()

    @field_validator("occurred_at")
    @classmethod
    def _when(cls, value):
        if isinstance(value, dt.datetime) and value.tzinfo is None:
            raise ValueError("occurred_at: needs a UTC offset (or Unix seconds)")
        return value


class LedgerMovementOut(BaseModel):
    id: str
    source: str
    kind: str
    amount_minor: int
    currency: str
    occurred_at: int
    reference: str | None
    state: str
    action_id: str | None
    recorded_at: int


class MovementsOut(BaseModel):
    items: list[LedgerMovementOut]


# The API's envelopes, as on every other route: 400 for a body that is not JSON, 413 for one over
# IMPRI_MAX_BODY_BYTES, 429 when a key is over its rate.
ERRORS = {
    400: ErrorOut,
    401: ErrorOut,
    403: ErrorOut,
    409: ErrorOut,
    413: ErrorOut,
    422: ErrorOut,
    429: ErrorOut,
}


# ledger.models.State's values, spelled out for the OpenAPI document (tests/ledger/test_api.py
# holds the two equal).
StateFilter = Literal[
    "",
    "matched",
    "mismatch",
    "unapproved",
    "duplicate",
    "unsettled",
    "unreported",
    "explained",
    "awaiting",
]


def _out(movement: Movement) -> dict:
    """The action's read's movement (``selectors.movement_out``) and what the API adds."""
    return {
        **selectors.movement_out(movement),
        "reference": movement.reference or None,
        "action_id": movement.action_id,
        "recorded_at": unix(movement.recorded_at),
    }


def _service(request) -> None:
    principal = request.auth
    if principal.user is None or not principal.key.is_service:
        raise Forbidden("recording movements needs a service token (impri token --service)")


@router.post("/movements", response={200: LedgerMovementOut, 201: LedgerMovementOut, **ERRORS})
def record_movement(request, data: MovementIn):
    """Record a movement any processor reported; idempotent on ``id`` (another body: 409)."""
    _service(request)
    when = data.occurred_at
    body = data.model_dump(mode="json")
    movement, new = services.record_movement(
        services.Incoming(
            source="api",
            external_id=data.id,
            kind=data.kind,
            amount_minor=data.amount_minor,
            currency=data.currency,
            occurred_at=when,
            reference=data.reference or "",
            metadata=data.metadata or {},
            action_id=data.action_id or "",
        ),
        idempotency_hash=services.body_sha256(body),
    )
    return Status(201 if new else 200, _out(movement))


@router.get("/movements", response={200: MovementsOut, **ERRORS})
def list_movements(
    request,
    state: Annotated[StateFilter, Query(description="a reconciliation state; empty: all")] = "",
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
):
    """Movements, newest first, for reviewers (a reviewer or service token)."""
    if request.auth.user is None:
        raise Forbidden("agent keys can't read the ledger; a reviewer token is needed")
    return {"items": [_out(m) for m in selectors.movements(state)[:limit]]}
