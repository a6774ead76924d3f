"""What agents and reviewers send: a push, a decision, a rejection, a result, a cancellation."""

from __future__ import annotations

import unicodedata
from typing import Annotated, Any, Literal

from django.conf import settings
from pydantic import (
    Field,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from plumbing import strict_json
from rules.paths import path_problem

from .validation import (
    EDIT_PATH,
    FLAG_RE,
    JSON_RULES,
    KIND_RE,
    NO_NUL,
    PAYLOAD_JSON_RULES,
    JsonObject,
    PreviewFormatLiteral,
    RejectReasonLiteral,
    StrictModel,
    check_http_url,
    check_text,
    json_problem,
    resolve_path,
)

# Idempotency keys Impri derives for itself (the gateway's ``mcp-gateway:<digest>:<n>``) live
# under these prefixes, compared after NFKC and case folding: no agent may write one, at any
# door (docs/security.md, "Impri's own identifiers").
RESERVED_KEY_PREFIXES = ("impri:", "mcp-gateway:")


def reserved_key_problem(key: str) -> str | None:
    """Why an agent may not use ``key`` as an idempotency key (it is Impri's), or None."""
    folded = unicodedata.normalize("NFKC", key).casefold().strip()
    for prefix in RESERVED_KEY_PREFIXES:
        if folded.startswith(prefix):
            return f"keys starting with {prefix!r} are reserved for Impri's own use"
    return None


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

    @model_validator(mode="after")
    def _json_reads_one_way(self) -> PreviewIn:
        # Read once here, so no stored preview can make the inbox page fail to render it.
        if self.format == "json":
            try:
                strict_json.loads(self.body)
            except strict_json.Refused as exc:
                raise ValueError(f"preview.body: {exc}") from None
            except ValueError:
                raise ValueError("preview.body: is not JSON (the format is json)") from None
        return self


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
        description="The exact thing to execute once approved (a JSON object). "
        + PAYLOAD_JSON_RULES
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
        description="Labelled items the reviewer needs: customer message, order summary. "
        + JSON_RULES,
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
    # strict: a JSON number only; pydantic's lax mode would take `true` as 1 and "60" as 60.
    expires_in_s: int | None = Field(
        default=None, ge=1, strict=True, description="Seconds until the action expires undecided."
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
        if not KIND_RE.fullmatch(value):
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

    @field_validator("idempotency_key")
    @classmethod
    def _idempotency_key(cls, value: str | None) -> str | None:
        problem = None if value is None else reserved_key_problem(value)
        if problem:
            raise ValueError(f"idempotency_key: {problem}")
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
            if not FLAG_RE.fullmatch(flag) or len(flag) > 60:
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
        for index, path in enumerate(paths):
            if path_problem(path):  # one spelling per path (rules.paths): bounds are keyed by it
                raise ValueError(f"editable[{index}]: {path!r}: {path_problem(path)}")
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
                "additionalProperties": True,
                "propertyNames": {"pattern": EDIT_PATH},
                "description": 'Editable paths to change, e.g. {"payload.amount_cents": 5000}; '
                "each must be listed in the action's `editable` and keep the original's JSON "
                "type. " + PAYLOAD_JSON_RULES,
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
        default=None,
        description="What the executor reported, e.g. the processor's transaction id: text or "
        "a JSON object. " + JSON_RULES,
    )
    grant: str | None = Field(
        default=None,
        max_length=4000,
        description="The grant that came with the approval, when the executor checked one.",
    )
    reference: str | None = Field(
        default=None,
        min_length=1,
        max_length=255,
        pattern=r"^[\x21-\x7e]+$",
        description="The processor's id for what was executed (a Stripe refund `re_...`): "
        "how reconciliation finds the money that moved (docs/reconciliation.md).",
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
