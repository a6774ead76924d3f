"""Problem validation every contract shares: text and JSON values a database stores and a page shows,
timestamps, URLs, dotted paths; each refusal names the field."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    WithJsonSchema,
)

from rules.paths import index_of

# Used with fullmatch (never .match: "$" also matches before a final newline).
KIND_RE = re.compile(r"^[a-z0-9_-]+(\.[a-z0-9_-]+)*$")
FLAG_RE = re.compile(r"^[a-z0-9_.:-]+$")

PreviewFormatLiteral = Literal["plain", "markdown", "diff", "json"]
RejectReasonLiteral = Literal[
    "wrong_amount", "policy", "duplicate", "needs_info", "suspicious", "other"
]
RFC3339_RE = re.compile(
    r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?([Zz]|[+-][0-9]{2}:[0-9]{2})$"
)


def _rfc3339_text(value: Any) -> Any:
    if isinstance(value, datetime) and value.tzinfo is not None:
        return value
    if not isinstance(value, str) or not RFC3339_RE.fullmatch(value):
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


# Agent JSON (payload, context, result detail, edit values) is described as free-form
# JSON: an object is `type: object, additionalProperties: true`, a value `{}`. That is the
# form client generators accept (openapi-python-client, openapi-typescript,
# openapi-generator); a recursive schema is not, and the generated clients lost every
# operation that sends agent JSON. What a schema could add (no NUL, numbers below 10^21 in
# magnitude, depth) is stated in the description and checked by ``json_problem``, which
# names the field in the 422.
NO_NUL = "^[^\\x00]*$"
JSON_RULES = (
    "Free-form JSON: text without NUL, numbers below 10^21 in magnitude, "
    f"nested at most {MAX_JSON_DEPTH} deep (else 422 naming the field)."
)
# The payload (and an edit of it) is I-JSON besides (rules.money.ijson_problem, in the service).
PAYLOAD_JSON_RULES = (
    "Free-form I-JSON: text without NUL, numbers within ±(2^53 − 1), "
    f"nested at most {MAX_JSON_DEPTH} deep (else 422 naming the path)."
)
JSON_OBJECT_SCHEMA = {
    "type": "object",
    "additionalProperties": True,
    "propertyNames": {"pattern": NO_NUL},
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
        if not isinstance(node, dict | list):
            problem = _scalar_problem(node)
            if problem:
                return f"{where}: {problem}"
            continue
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


def _scalar_problem(node: Any) -> str | None:
    """What a JSON scalar can't hold: NUL or a lone surrogate, NaN, Infinity, a huge integer."""
    if isinstance(node, str):
        return text_problem(node)
    if isinstance(node, bool) or not isinstance(node, int | float):
        return None
    if node != node or node in (float("inf"), float("-inf")):
        return "NaN and Infinity are not JSON numbers"
    if abs(node) > MAX_SAFE_INTEGER:
        return "numbers must be below 10^21 in magnitude (send larger ones as strings)"
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
        elif isinstance(node, list) and (index := index_of(part)) is not None and index < len(node):
            node = node[index]  # one spelling: "0", never "00", "０" or "+0" (rules.paths)
        else:
            return False, None
    return True, node
