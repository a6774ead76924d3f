"""What Impri answers: an action, a decision, a page of actions, an error."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    Field,
)

from .validation import PreviewFormatLiteral, RejectReasonLiteral


class PreviewOut(BaseModel):
    format: PreviewFormatLiteral
    body: str


class Actor(BaseModel):
    type: Literal["reviewer", "rule", "agent", "system"]
    name: str


UnixSeconds = Annotated[int, Field(description="Unix seconds (UTC).")]


class ResultOut(BaseModel):
    status: Literal["executed", "failed"]
    detail: dict[str, Any] | str | None
    reference: str | None = Field(
        default=None, description="The processor's transaction id the agent reported."
    )
    reported_at: UnixSeconds


class MovementOut(BaseModel):
    id: str
    source: str
    kind: Literal["refund", "charge"]
    amount_minor: int
    currency: str
    occurred_at: UnixSeconds
    state: str


class ReconciliationOut(BaseModel):
    state: Annotated[
        str,
        Field(
            description="matched, mismatch, unapproved, duplicate, unsettled, unreported, "
            "explained, or awaiting (approved, no movement yet); docs/reconciliation.md."
        ),
    ]
    movements: list[MovementOut]


class ActionOut(BaseModel):
    action_id: str
    agent: str
    kind: str
    title: str
    preview: PreviewOut
    payload: dict[str, Any]
    original_payload: dict[str, Any]
    payload_sha256: Annotated[
        str, Field(description="SHA-256 of `payload`: what an approval names (`payload_sha256`).")
    ]
    context: dict[str, Any]
    target_url: str | None
    editable: list[str]
    edit_bounds: Annotated[
        dict[str, dict[str, Any]],
        Field(
            description='Per editable path, the {min, max} an edit must keep to ("original": the figure pushed).'
        ),
    ]
    flags: list[str]
    idempotency_key: str | None
    status: Annotated[
        str,
        Field(
            description="pending, approved, rejected, changes_requested, expired, cancelled, "
            "executed or failed."
        ),
    ]
    supersedes: str | None = Field(
        default=None, description="The earlier action of this agent that this one replaces."
    )
    created_at: UnixSeconds
    expires_at: UnixSeconds
    decision_at: UnixSeconds | None
    decided_by: Actor | None
    note: str
    reason: RejectReasonLiteral | None = None
    edited_by_human: bool
    result: ResultOut | None
    reconciliation: ReconciliationOut | None = Field(
        default=None,
        description="What the payment processor moved for this action, held against the "
        "approval (docs/reconciliation.md); null when nothing is known yet.",
    )
    inbox_url: str


class DecisionOut(BaseModel):
    action_id: str
    status: Annotated[
        str,
        Field(
            description="pending means: no decision yet, call again. Only approved allows "
            "executing; rejected, changes_requested (note says what to change: push a corrected "
            "action with `supersedes`), expired and cancelled are final."
        ),
    ]
    decision_at: UnixSeconds | None
    payload: dict[str, Any]
    preview: Annotated[
        PreviewOut,
        Field(
            description="Once decided, always a diff of the proposed payload against the "
            "approved one (empty when nothing changed, or when not approved)."
        ),
    ]
    edited_by_human: bool
    decided_by: Actor | None
    note: str
    reason: RejectReasonLiteral | None = Field(
        default=None, description="A rejection's reason code, when the reviewer gave one."
    )
    payload_sha256: str | None = Field(
        default=None, description="SHA-256 of the approved payload's canonical JSON."
    )
    grant: str | None = Field(
        default=None,
        description="Approved: a signed single-use grant (compact JWS, EdDSA) the executor "
        "verifies against /.well-known/jwks.json before moving money. Stored with the "
        "decision: every read returns the same bytes.",
    )


class ActionPage(BaseModel):
    items: list[ActionOut]
    next_cursor: str | None


class ErrorOut(BaseModel):
    detail: str
    code: str
    field: str | None = None
