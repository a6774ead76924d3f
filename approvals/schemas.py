"""Input and output contracts shared by the REST API and the MCP tools.

Validation lives here so that every adapter refuses the same input with the
same message, naming the field.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from django.conf import settings
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    WithJsonSchema,
    field_validator,
    model_validator,
)

KIND_RE = re.compile(r"^[a-z0-9_-]+(\.[a-z0-9_-]+)*$")
FLAG_RE = re.compile(r"^[a-z0-9_.:-]+$")

PreviewFormatLiteral = Literal["plain", "markdown", "diff", "json"]
RFC3339_RE = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")


def _rfc3339_text(value: Any) -> Any:
    if isinstance(value, datetime) and value.tzinfo is not None:
        return value
    if not isinstance(value, str) or not RFC3339_RE.match(value):
        raise ValueError("must be a date-time with a time zone, e.g. 2026-01-31T12:00:00Z")
    return value


def _in_calendar(value: datetime) -> datetime:
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise ValueError("is outside the calendar (years 1 to 9999 in UTC)") from None


# An RFC 3339 date-time (what `format: date-time` promises): no bare date, no
# Unix number, no naive time, and nothing that overflows the calendar in UTC.
Timestamp = Annotated[datetime, BeforeValidator(_rfc3339_text), AfterValidator(_in_calendar)]


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid")


def check_http_url(value: str, field: str = "target_url") -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"{field} must be an absolute http:// or https:// URL")
    if any(ch.isspace() or ord(ch) < 32 for ch in value):
        raise ValueError(f"{field} must not contain whitespace or control characters")
    return value


# Containers nested deeper than this are refused: nobody needs them, and past
# about 250 levels serializers and renderers hit their recursion limits.
MAX_JSON_DEPTH = 64
# Numbers up to this magnitude are stored and hashed exactly (audit/canonical.py
# writes integers below 10**21 digit for digit), so 2**63 or 1e20 from an agent
# survive both databases and verify; beyond it an amount has no business in a
# payload and is refused (send it as a string).
MAX_SAFE_INTEGER = 10**21 - 1
_SURROGATE = re.compile("[\ud800-\udfff]")


# What the OpenAPI document promises for agent JSON (payload, context, result
# detail, edit values), as far as JSON Schema can say it: no NUL in text or keys,
# numbers within the safe range. (Depth and lone surrogates are checked too.)
NO_NUL = "^[^\\x00]*$"
JSON_VALUE_REF = "#/components/schemas/JsonValue"
# ninja resolves every $ref while it builds the document, so fields point at this
# marker, which ``approvals.api.ImpriAPI`` swaps for the $ref afterwards.
JSON_VALUE_MARKER = {"x-impri-json-value": True}
JSON_OBJECT_SCHEMA = {
    "type": "object",
    "additionalProperties": JSON_VALUE_MARKER,
    "propertyNames": {"pattern": NO_NUL},
}
JSON_VALUE_SCHEMA = {
    "description": "Any JSON value: text without NUL, numbers below 10^21 in magnitude, "
    f"nested at most {MAX_JSON_DEPTH} deep.",
    "anyOf": [
        {"type": "string", "pattern": NO_NUL},
        {"type": "number", "minimum": -MAX_SAFE_INTEGER, "maximum": MAX_SAFE_INTEGER},
        {"type": "boolean"},
        {"type": "null"},
        {"type": "array", "items": JSON_VALUE_MARKER},
        JSON_OBJECT_SCHEMA,
    ],
}
JsonObject = Annotated[dict[str, Any], WithJsonSchema(JSON_OBJECT_SCHEMA)]
EDIT_PATH = "^payload\\.[^\\x00]+$"


def safe_text(text: str) -> str:
    """``text`` with lone surrogates written as ``\\udXXX``, so a message quoting it can be sent."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def text_problem(text: str) -> str | None:
    """Why ``text`` can't be stored and shown as it is (NUL, lone surrogate), or None."""
    if "\x00" in text:
        return "text must not contain NUL characters"
    found = _SURROGATE.search(text)
    if found:
        return f"text must not contain a lone surrogate (U+{ord(found.group()):04X})"
    return None


def json_problem(value: Any, path: str) -> str | None:
    """The first part of a JSON value that can't be stored and shown, as ``path: problem``.

    Refused: containers nested deeper than ``MAX_JSON_DEPTH``, NaN and Infinity
    (not JSON; PostgreSQL refuses them), integers outside I-JSON's safe range,
    and text (values or keys) with NUL or a lone surrogate. Walked with a stack,
    so a hostile depth can't exhaust the recursion limit here.
    """
    stack: list[tuple[Any, str, int]] = [(value, path, 1)]
    while stack:
        node, where, depth = stack.pop()
        if isinstance(node, str):
            problem = text_problem(node)
            if problem:
                return f"{where}: {problem}"
        elif isinstance(node, bool) or node is None:
            continue
        elif isinstance(node, int | float):
            if node != node or node in (float("inf"), float("-inf")):
                return f"{where}: NaN and Infinity are not JSON numbers"
            if abs(node) > MAX_SAFE_INTEGER:
                return f"{where}: numbers must be below 10^21 in magnitude (send larger ones as strings)"
        elif isinstance(node, dict | list):
            if depth > MAX_JSON_DEPTH:
                return f"{where}: nested deeper than {MAX_JSON_DEPTH} levels"
            items = node.items() if isinstance(node, dict) else enumerate(node)
            children = []
            for key, item in items:
                key_text = str(key)
                if isinstance(key, str):
                    problem = text_problem(key)
                    if problem:
                        return f"{where}.{safe_text(key_text)}: key {problem}"
                children.append((item, f"{where}.{key_text}", depth + 1))
            stack.extend(reversed(children))
    return None


def check_text(value: str, field: str) -> str:
    """A pydantic validator body: refuse NUL and lone surrogates, naming ``field``."""
    problem = text_problem(value)
    if problem:
        raise ValueError(f"{field}: {problem}")
    return value


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


URL_SCHEMA = {"format": "uri", "pattern": "^[hH][tT][tT][pP][sS]?://[^\\s/?#]+[^\\s]*$"}


class PreviewIn(StrictModel):
    format: PreviewFormatLiteral = Field(description="How the reviewer's inbox renders `body`.")
    body: str = Field(
        max_length=100_000,
        description="What the reviewer reads; untrusted, always escaped.",
        json_schema_extra={"pattern": NO_NUL},
    )


class ActionIn(StrictModel):
    kind: str = Field(
        min_length=1,
        max_length=100,
        description="Dotted action kind, e.g. `payment.refund`.",
        json_schema_extra={"pattern": KIND_RE.pattern},
    )
    title: str = Field(
        min_length=1,
        description="One line for the reviewer's queue.",
        json_schema_extra={"maxLength": 200, "pattern": "^[^\\r\\n\\x00]*$"},
    )
    preview: PreviewIn
    payload: JsonObject = Field(
        description="The exact thing to execute once approved (a JSON object)."
    )
    target_url: str | None = Field(
        default=None,
        max_length=2000,
        description="http(s) link to the object acted on.",
        json_schema_extra=URL_SCHEMA,
    )
    editable: list[Annotated[str, Field(json_schema_extra={"pattern": EDIT_PATH})] | EditableIn] = (
        Field(
            default_factory=list,
            max_length=50,
            description="Dotted paths under `payload.` a reviewer may change: a path, or "
            "`{path, min, max}` to narrow the bounds a reviewer may approve within (never widen them).",
        )
    )
    flags: list[Annotated[str, Field(json_schema_extra={"pattern": "^[a-z0-9_.:-]{1,60}$"})]] = (
        Field(default_factory=list, max_length=20, description="e.g. `policy_exception`.")
    )
    context: JsonObject = Field(
        default_factory=dict,
        description="Labelled items the reviewer needs: customer message, order summary.",
    )
    idempotency_key: str | None = Field(
        default=None, min_length=1, max_length=200, json_schema_extra={"pattern": NO_NUL}
    )
    callback_url: str | None = Field(
        default=None,
        max_length=2000,
        description="http(s) URL Impri POSTs the decision to (signed, Standard Webhooks) when the action settles.",
        json_schema_extra=URL_SCHEMA,
    )
    expires_in_s: int | None = Field(
        default=None, ge=1, description="Seconds until the action expires undecided."
    )
    supersedes: str | None = Field(
        default=None,
        min_length=1,
        max_length=40,
        pattern=r"^[A-Za-z0-9_]+$",
        description="The id of an earlier action of yours that this one replaces (typically one "
        "settled as `changes_requested`); it must not be pending or approved.",
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
        for name in ("title", "preview", "target_url", "idempotency_key", "callback_url"):
            text = getattr(self, name) if name != "preview" else self.preview.body
            if text is not None:
                check_text(text, name if name != "preview" else "preview.body")
        return self

    @field_validator("payload", "context")
    @classmethod
    def _storable_json(cls, value: dict, info) -> dict:
        problem = json_problem(value, info.field_name)
        if problem:
            raise ValueError(problem)
        return value


NOTE_SCHEMA = {"pattern": NO_NUL}


def _check_push_bounds(path: str, original: Any, bounds: dict) -> None:
    if isinstance(original, bool) or not isinstance(original, int | float):
        raise ValueError(f"editable: {path!r} has min/max but is not a number in payload")
    low, high = (original if bounds.get(k) == "original" else bounds.get(k) for k in ("min", "max"))
    if low is not None and high is not None and low > high:
        raise ValueError(f"editable: {path!r} min must not be above max")


class DecisionIn(StrictModel):
    edits: Annotated[
        dict[str, Any],
        WithJsonSchema(
            {
                "type": "object",
                "additionalProperties": JSON_VALUE_MARKER,
                "propertyNames": {"pattern": EDIT_PATH},
                "description": 'Editable paths to change, e.g. {"payload.amount_cents": 5000}; '
                "each must be listed in the action's `editable`.",
            }
        ),
    ] = Field(default_factory=dict)
    payload_sha256: str | None = Field(
        default=None,
        pattern=r"^[0-9a-fA-F]{64}$",
        description="SHA-256 of the payload you reviewed (before your edits), as `payload_sha256` "
        "of GET /actions/{id}. Required once another reviewer changed the payload; a mismatch "
        "answers 409 with the current payload.",
    )
    note: str = Field(default="", max_length=5000, json_schema_extra=NOTE_SCHEMA)

    @model_validator(mode="after")
    def _storable(self) -> DecisionIn:
        check_text(self.note, "note")
        for path, value in self.edits.items():
            check_text(path, "edits")
            problem = json_problem(value, f"edits.{path}")
            if problem:
                raise ValueError(problem)
        return self


RejectReasonLiteral = Literal[
    "wrong_amount", "policy", "duplicate", "needs_info", "suspicious", "other"
]


class RejectIn(StrictModel):
    note: str = Field(default="", max_length=5000, json_schema_extra=NOTE_SCHEMA)
    reason: RejectReasonLiteral | None = Field(
        default=None, description="A code the agent can act on, beside the free-text note."
    )

    @field_validator("note")
    @classmethod
    def _note(cls, value: str) -> str:
        return check_text(value, "note")


class ChangesIn(StrictModel):
    note: str = Field(
        min_length=1,
        max_length=5000,
        description="What the agent should change (required): it reads this message.",
        json_schema_extra=NOTE_SCHEMA,
    )

    @field_validator("note")
    @classmethod
    def _note(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("note must say what should change")
        return check_text(value, "note")


class ResultIn(StrictModel):
    status: Literal["executed", "failed"]
    detail: (
        JsonObject | Annotated[str, WithJsonSchema({"type": "string", "pattern": NO_NUL})] | None
    ) = Field(
        default=None, description="What the executor reported, e.g. the processor's transaction id."
    )
    grant: str | None = Field(
        default=None,
        max_length=4000,
        description="The grant that came with the approval, when the executor checked one.",
    )

    @model_validator(mode="after")
    def _storable(self) -> ResultIn:
        problem = json_problem(self.detail, "detail")
        if problem:
            raise ValueError(problem)
        return self


class CancelIn(StrictModel):
    reason: str = Field(default="", max_length=5000, json_schema_extra=NOTE_SCHEMA)

    @field_validator("reason")
    @classmethod
    def _reason(cls, value: str) -> str:
        return check_text(value, "reason")


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
        "verifies against /.well-known/jwks.json before moving money.",
    )


class ActionPage(BaseModel):
    items: list[ActionOut]
    next_cursor: str | None


class ErrorOut(BaseModel):
    detail: str
    code: str
    field: str | None = None
