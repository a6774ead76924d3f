"""What Impri answers, as dataclasses. Every one keeps the whole answer in ``raw``.

Timestamps arrive as Unix seconds (integers) or, from older servers, ISO 8601
strings; both become timezone-aware UTC ``datetime`` values.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

__all__ = ["Action", "Actor", "Decision", "Preview", "Result", "parse_time"]

# Statuses in which the action was approved; executed/failed also carry a result.
APPROVED = "approved"
SETTLED_WITH_RESULT = ("executed", "failed")


def parse_time(value: Any) -> datetime | None:
    """Unix seconds (int/float) or an ISO 8601 string → aware UTC datetime; None stays None."""
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        raise TypeError(f"not a timestamp: {value!r}")
    if isinstance(value, int | float):
        return datetime.fromtimestamp(value, tz=timezone.utc)
    if isinstance(value, str):
        text = value.strip()
        if text.endswith(("Z", "z")):
            text = text[:-1] + "+00:00"
        parsed = datetime.fromisoformat(text)
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=timezone.utc)
        return parsed.astimezone(timezone.utc)
    raise TypeError(f"not a timestamp: {value!r}")


@dataclass(frozen=True)
class Preview:
    format: str
    body: str

    @classmethod
    def from_json(cls, data: Any) -> Preview:
        data = data or {}
        return cls(format=data.get("format", "plain"), body=data.get("body", ""))

    def to_json(self) -> dict:
        return {"format": self.format, "body": self.body}


@dataclass(frozen=True)
class Actor:
    """Who decided: ``type`` is reviewer, rule, agent or system."""

    type: str
    name: str

    @classmethod
    def from_json(cls, data: Any) -> Actor | None:
        return cls(type=data.get("type", ""), name=data.get("name", "")) if data else None


@dataclass(frozen=True)
class Result:
    status: str
    detail: Any
    reported_at: datetime | None
    reference: str | None = None  # the processor's id the agent reported

    @classmethod
    def from_json(cls, data: Any) -> Result | None:
        if not data:
            return None
        return cls(
            status=data.get("status", ""),
            detail=data.get("detail"),
            reported_at=parse_time(data.get("reported_at")),
            reference=data.get("reference"),
        )


@dataclass(frozen=True)
class Action:
    """An action as Impri holds it (push, get, cancel and report answer this)."""

    action_id: str
    status: str
    kind: str
    title: str
    preview: Preview
    payload: dict
    original_payload: dict
    agent: str
    context: dict
    target_url: str | None
    editable: list[str]
    flags: list[str]
    idempotency_key: str | None
    created_at: datetime | None
    expires_at: datetime | None
    decision_at: datetime | None
    decided_by: Actor | None
    note: str
    reason: str | None
    edited_by_human: bool
    result: Result | None
    inbox_url: str | None
    raw: dict = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, data: dict) -> Action:
        return cls(
            action_id=data["action_id"],
            status=data.get("status", ""),
            kind=data.get("kind", ""),
            title=data.get("title", ""),
            preview=Preview.from_json(data.get("preview")),
            payload=data.get("payload") or {},
            original_payload=data.get("original_payload") or data.get("payload") or {},
            agent=data.get("agent", ""),
            context=data.get("context") or {},
            target_url=data.get("target_url"),
            editable=list(data.get("editable") or []),
            flags=list(data.get("flags") or []),
            idempotency_key=data.get("idempotency_key"),
            created_at=parse_time(data.get("created_at")),
            expires_at=parse_time(data.get("expires_at")),
            decision_at=parse_time(data.get("decision_at")),
            decided_by=Actor.from_json(data.get("decided_by")),
            note=data.get("note") or "",
            reason=data.get("reason") or None,
            edited_by_human=bool(data.get("edited_by_human")),
            result=Result.from_json(data.get("result")),
            inbox_url=data.get("inbox_url"),
            raw=data,
        )


@dataclass(frozen=True)
class Decision:
    """The answer to ``await_decision``. ``pending`` means: no decision yet.

    Execute ``payload`` (what was approved, perhaps edited by a human), never
    what you pushed. ``grant`` is the signed permission an executor checks with
    ``verify_grant`` (``None`` when the server issues none); ``payload_sha256``
    is the hash the grant is bound to.
    """

    action_id: str
    status: str
    decision_at: datetime | None
    payload: dict
    preview: Preview
    edited_by_human: bool
    decided_by: Actor | None
    note: str
    reason: str | None
    payload_sha256: str | None
    grant: str | None
    raw: dict = field(repr=False, compare=False)

    @property
    def pending(self) -> bool:
        return self.status == "pending"

    @property
    def approved(self) -> bool:
        """True only while the approval awaits execution (not once a result was reported)."""
        return self.status == APPROVED

    @classmethod
    def from_json(cls, data: dict) -> Decision:
        return cls(
            action_id=data["action_id"],
            status=data.get("status", ""),
            decision_at=parse_time(data.get("decision_at")),
            payload=data.get("payload") or {},
            preview=Preview.from_json(data.get("preview")),
            edited_by_human=bool(data.get("edited_by_human")),
            decided_by=Actor.from_json(data.get("decided_by")),
            note=data.get("note") or "",
            reason=data.get("reason") or None,
            payload_sha256=data.get("payload_sha256"),
            grant=data.get("grant"),
            raw=data,
        )
