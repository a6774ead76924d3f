"""Input and output contracts shared by the REST API and the MCP tools.

Validation lives here so that every adapter refuses the same input with the
same message, naming the field.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from django.conf import settings
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

KIND_RE = re.compile(r"^[a-z0-9_-]+(\.[a-z0-9_-]+)*$")
FLAG_RE = re.compile(r"^[a-z0-9_.:-]+$")

PreviewFormatLiteral = Literal["plain", "markdown", "diff", "json"]


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid")


def check_http_url(value: str, field: str = "target_url") -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"{field} must be an absolute http:// or https:// URL")
    if any(ch.isspace() or ord(ch) < 32 for ch in value):
        raise ValueError(f"{field} must not contain whitespace or control characters")
    return value


def find_nul(value: Any, path: str) -> str | None:
    """Return the path of the first string containing NUL (PostgreSQL can't store it)."""
    if isinstance(value, str):
        return path if "\x00" in value else None
    if isinstance(value, dict):
        for key, item in value.items():
            if "\x00" in key:
                return f"{path}.{key!r}"
            found = find_nul(item, f"{path}.{key}")
            if found:
                return found
    if isinstance(value, list):
        for index, item in enumerate(value):
            found = find_nul(item, f"{path}.{index}")
            if found:
                return found
    return None


def find_non_finite(value: Any, path: str) -> str | None:
    """Return the path of the first NaN or infinity (``1e400`` parses as one): JSON has neither."""
    if isinstance(value, float):
        return None if math.isfinite(value) else path
    if isinstance(value, dict):
        for key, item in value.items():
            found = find_non_finite(item, f"{path}.{key}")
            if found:
                return found
    if isinstance(value, list):
        for index, item in enumerate(value):
            found = find_non_finite(item, f"{path}.{index}")
            if found:
                return found
    return None


def resolve_path(document: dict, dotted: str) -> tuple[bool, Any]:
    """Look up ``payload.a.b`` in ``{"payload": …}``; list items by index."""
    node: Any = document
    for part in dotted.split("."):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return False, None
    return True, node


class EditableIn(StrictModel):
    """An editable path with the agent's own bounds: they can only narrow what the rules allow."""

    path: str = Field(description="Dotted path under `payload.`, e.g. `payload.amount_cents`.")
    min: Any = Field(default=None, description="Lowest value a reviewer may approve (a number).")
    max: Any = Field(
        default=None,
        description='Highest value a reviewer may approve (a number, or "original").',
    )

    @model_validator(mode="after")
    def _limits(self) -> EditableIn:
        for key in ("min", "max"):
            limit = getattr(self, key)
            if limit is None or limit == "original":
                continue
            if isinstance(limit, bool) or not isinstance(limit, int | float) or limit != limit:
                raise ValueError(f"editable: {self.path!r} {key} must be a number or original")
            if isinstance(limit, float) and limit in (float("inf"), float("-inf")):
                raise ValueError(f"editable: {self.path!r} {key} must be a finite number")
        return self

    def bounds(self) -> dict:
        return {key: getattr(self, key) for key in ("min", "max") if getattr(self, key) is not None}


class PreviewIn(StrictModel):
    format: PreviewFormatLiteral = Field(description="How the reviewer's inbox renders `body`.")
    body: str = Field(
        max_length=100_000, description="What the reviewer reads; untrusted, always escaped."
    )


class ActionIn(StrictModel):
    kind: str = Field(
        min_length=1, max_length=100, description="Dotted action kind, e.g. `payment.refund`."
    )
    title: str = Field(min_length=1, description="One line for the reviewer's queue.")
    preview: PreviewIn
    payload: dict[str, Any] = Field(
        description="The exact thing to execute once approved (a JSON object)."
    )
    target_url: str | None = Field(
        default=None, max_length=2000, description="http(s) link to the object acted on."
    )
    editable: list[str | EditableIn] = Field(
        default_factory=list,
        max_length=50,
        description="Dotted paths under `payload.` a reviewer may change: a path, or "
        "`{path, min, max}` to narrow the bounds a reviewer may approve within (never widen them).",
    )
    flags: list[str] = Field(
        default_factory=list, max_length=20, description="e.g. `policy_exception`."
    )
    context: dict[str, Any] = Field(
        default_factory=dict,
        description="Labelled items the reviewer needs: customer message, order summary.",
    )
    idempotency_key: str | None = Field(default=None, min_length=1, max_length=200)
    callback_url: str | None = Field(
        default=None,
        max_length=2000,
        description="http(s) URL Impri POSTs the decision to (signed, Standard Webhooks) when the action settles.",
    )
    expires_in_s: int | None = Field(
        default=None, ge=1, description="Seconds until the action expires undecided."
    )

    @field_validator("kind")
    @classmethod
    def _kind(cls, value: str) -> str:
        if not KIND_RE.match(value):
            raise ValueError("kind must be dotted lowercase words, e.g. payment.refund")
        return value

    @field_validator("title")
    @classmethod
    def _title(cls, value: str) -> str:
        limit = settings.IMPRI_MAX_TITLE_CHARS
        if len(value) > limit:
            raise ValueError(f"title must be at most {limit} characters (got {len(value)})")
        if "\n" in value or "\r" in value:
            raise ValueError("title must be a single line")
        return value

    @field_validator("target_url")
    @classmethod
    def _target_url(cls, value: str | None) -> str | None:
        return None if value in (None, "") else check_http_url(value)

    @field_validator("callback_url")
    @classmethod
    def _callback_url(cls, value: str | None) -> str | None:
        return None if value in (None, "") else check_http_url(value, "callback_url")

    @field_validator("flags")
    @classmethod
    def _flags(cls, value: list[str]) -> list[str]:
        for flag in value:
            if not FLAG_RE.match(flag) or len(flag) > 60:
                raise ValueError(
                    f"flag {flag!r} must be short lowercase text like policy_exception"
                )
        return sorted(set(value))

    @field_validator("expires_in_s")
    @classmethod
    def _expires(cls, value: int | None) -> int | None:
        if value is not None and value > settings.IMPRI_MAX_EXPIRES_S:
            raise ValueError(
                f"expires_in_s must be at most {settings.IMPRI_MAX_EXPIRES_S} (IMPRI_MAX_EXPIRES_S)"
            )
        return value

    def editable_paths(self) -> list[str]:
        return [entry if isinstance(entry, str) else entry.path for entry in self.editable]

    def push_bounds(self) -> dict[str, dict]:
        """The agent's own ``{min, max}`` per editable path (only paths that set one)."""
        return {
            entry.path: entry.bounds()
            for entry in self.editable
            if isinstance(entry, EditableIn) and entry.bounds()
        }

    @model_validator(mode="after")
    def _editable_paths_exist(self) -> ActionIn:
        document = {"payload": self.payload}
        paths = self.editable_paths()
        if len(set(paths)) != len(paths):
            raise ValueError("editable: each path may be listed once")
        bounded = self.push_bounds()
        for path in paths:
            if not path.startswith("payload.") or path == "payload.":
                raise ValueError(
                    f"editable: {path!r} must be a path under payload., e.g. payload.amount_cents"
                )
            found, value = resolve_path(document, path)
            if not found:
                raise ValueError(f"editable: {path!r} does not exist in payload")
            if isinstance(value, dict | list) or value is None:
                raise ValueError(f"editable: {path!r} must point at a number, string or boolean")
            if path in bounded:
                _check_push_bounds(path, value, bounded[path])
        for name in ("title", "preview", "payload", "context", "target_url", "idempotency_key"):
            bad = find_nul(getattr(self, name) if name != "preview" else self.preview.body, name)
            if bad:
                raise ValueError(f"{bad}: text must not contain NUL characters")
        for name in ("payload", "context"):
            bad = find_non_finite(getattr(self, name), name)
            if bad:
                raise ValueError(f"{bad}: {NON_FINITE}")
        return self


NON_FINITE = "a number must be finite (no NaN, Infinity, or a float beyond ±1.8e308)"


def _check_push_bounds(path: str, original: Any, bounds: dict) -> None:
    if isinstance(original, bool) or not isinstance(original, int | float):
        raise ValueError(f"editable: {path!r} has min/max but is not a number in payload")
    low, high = (original if bounds.get(k) == "original" else bounds.get(k) for k in ("min", "max"))
    if low is not None and high is not None and low > high:
        raise ValueError(f"editable: {path!r} min must not be above max")


class DecisionIn(StrictModel):
    edits: dict[str, Any] = Field(
        default_factory=dict,
        description='Editable paths to change, e.g. {"payload.amount_cents": 5000}.',
    )
    payload_sha256: str | None = Field(
        default=None,
        pattern=r"^[0-9a-fA-F]{64}$",
        description="SHA-256 of the payload you reviewed (before your edits), as `payload_sha256` "
        "of GET /actions/{id}. Required once another reviewer changed the payload; a mismatch "
        "answers 409 with the current payload.",
    )
    note: str = Field(default="", max_length=5000)

    @model_validator(mode="after")
    def _finite(self) -> DecisionIn:
        for path, value in self.edits.items():
            if find_non_finite(value, f"edits.{path}"):
                raise ValueError(f"edits.{path}: {NON_FINITE}")
        return self


RejectReasonLiteral = Literal[
    "wrong_amount", "policy", "duplicate", "needs_info", "suspicious", "other"
]


class RejectIn(StrictModel):
    note: str = Field(default="", max_length=5000)
    reason: RejectReasonLiteral | None = Field(
        default=None, description="A code the agent can act on, beside the free-text note."
    )


class ResultIn(StrictModel):
    status: Literal["executed", "failed"]
    detail: dict[str, Any] | str | None = Field(
        default=None, description="What the executor reported, e.g. the processor's transaction id."
    )
    grant: str | None = Field(
        default=None,
        max_length=4000,
        description="The grant that came with the approval, when the executor checked one.",
    )

    @model_validator(mode="after")
    def _no_nul(self) -> ResultIn:
        bad = find_nul(self.detail, "detail")
        if bad:
            raise ValueError(f"{bad}: text must not contain NUL characters")
        bad = find_non_finite(self.detail, "detail")
        if bad:
            raise ValueError(f"{bad}: {NON_FINITE}")
        return self


class CancelIn(StrictModel):
    reason: str = Field(default="", max_length=5000)


# --- Outputs ----------------------------------------------------------------


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
    reported_at: UnixSeconds


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
    status: str
    created_at: UnixSeconds
    expires_at: UnixSeconds
    decision_at: UnixSeconds | None
    decided_by: Actor | None
    note: str
    reason: RejectReasonLiteral | None = None
    edited_by_human: bool
    result: ResultOut | None
    inbox_url: str


class DecisionOut(BaseModel):
    action_id: str
    status: Annotated[str, Field(description="pending means: no decision yet, call again.")]
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
        "verifies against /.well-known/jwks.json before moving money.",
    )


class ActionPage(BaseModel):
    items: list[ActionOut]
    next_cursor: str | None


class ErrorOut(BaseModel):
    detail: str
    code: str
    field: str | None = None
