"""The byte encodings that audit hashes and payload digests are computed over.

Scheme 2 (the current one) is RFC 8785, the JSON Canonicalization Scheme
(docs/ARCHITECTURE.md, "Decisions this layout keeps"), of the value *as stored*: keys sorted by UTF-16 code units, no
insignificant whitespace, strings escaped as ECMAScript's ``JSON.stringify``
does, and numbers in ECMAScript's shortest form. A number is therefore encoded
by its value, not by how one writer spelt it, and PostgreSQL's ``jsonb``
(whose numbers are ``numeric``: ``1e16`` reads back as ``10000000000000000``,
``-0.0`` as ``0.0``, ``1e-07`` as ``0.0000001``) cannot change a hash.

One deliberate extension: RFC 8785 writes every number as a double, so integers
beyond 2^53 would be rounded (the ``rfc8785`` package refuses them instead, and
``jsonb`` makes such integers out of floats like ``1e16``). Here integers below
10^21 in magnitude are written exactly (an amount is never rounded); from 10^21
on, an integer takes the form of the nearest double, because ``jsonb`` hands a
float such as ``1.5e300`` back as a 301-digit integer and both must hash alike.
A payload's numbers are I-JSON (``rules.money.ijson_problem`` refuses an
integer beyond ±(2^53 − 1) at push and edit), so for every payload this is byte
for byte RFC 8785: an executor in any language recomputes ``payload_sha256``
with a JCS library (``tests/core/test_money_kinds.py`` holds it to the ``rfc8785``
package). The extension serves context, results and audit data.
The Python client (``clients/python``, ``impri_client.canonical``) carries the
same encoding; ``tests/agents/test_client_canonical.py`` holds the two together.

Scheme 1 (events written before the change) is plain ``json.dumps`` with
sorted keys; it is kept only to verify those events.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from decimal import Decimal
from json.encoder import encode_basestring as _string  # json.dumps' own, non-ASCII kept
from typing import Any, cast

CURRENT_SCHEME = 2


def canonical_json(value: Any) -> bytes:
    """Scheme 2: RFC 8785 with exact integers below 10^21 (see above), UTF-8."""
    parts: list[str] = []
    _encode(value, parts)
    return "".join(parts).encode("utf-8")


def canonical_json_v1(value: Any) -> bytes:
    """Scheme 1, for events written before scheme 2: number spelling as Python writes it."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode(
        "utf-8"
    )


# Below this, an integral double prints all its digits in ECMAScript form, so an
# integer printed exactly and the equal double encode alike.
EXACT_INT_LIMIT = 10**21


def number_text(value: int | float) -> str:
    """One string per numeric value: ``1e16``, ``1e+16`` and ``10000000000000000`` alike."""
    if isinstance(value, bool):
        raise TypeError("a boolean is not a number")
    if isinstance(value, int):
        if -EXACT_INT_LIMIT < value < EXACT_INT_LIMIT:
            return int.__repr__(value)  # digits, also for an IntEnum
        return _double_text(float(value))
    return _double_text(value)


def _double_text(x: float) -> str:
    """ECMAScript Number::toString of a finite double (RFC 8785 §3.2.2.3)."""
    if not math.isfinite(x):
        raise ValueError(f"{x!r} is not a JSON number")
    if x == 0:
        return "0"  # -0.0 too: jsonb has no negative zero
    sign = "-" if x < 0 else ""
    # repr gives the shortest digits that round-trip, as ECMAScript requires.
    exact = Decimal(repr(abs(x))).normalize().as_tuple()
    digits = "".join(map(str, exact.digits))
    k = len(digits)
    n = cast(int, exact.exponent) + k  # x = 0.digits × 10^n (finite: never a letter)
    if k <= n <= 21:
        text = digits + "0" * (n - k)
    elif 0 < n <= 21:
        text = digits[:n] + "." + digits[n:]
    elif -6 < n <= 0:
        text = "0." + "0" * -n + digits
    else:
        exponent = n - 1
        mantissa = digits if k == 1 else digits[0] + "." + digits[1:]
        text = f"{mantissa}e{'+' if exponent > 0 else '-'}{abs(exponent)}"
    return sign + text


def _utf16(key: str) -> bytes:
    """RFC 8785 sorts keys by their UTF-16 code units."""
    return key.encode("utf-16-be", "surrogatepass")


def _encode(value: Any, out: list[str]) -> None:
    kind = type(value)
    if kind is str:
        out.append(_string(value))
    elif kind is dict:
        out.append("{")
        first = True
        for key in value:
            if type(key) is not str:
                raise TypeError(f"object keys must be strings, not {type(key).__name__}")
        for key in sorted(value, key=_utf16):
            if not first:
                out.append(",")
            first = False
            out.append(_string(key))
            out.append(":")
            _encode(value[key], out)
        out.append("}")
    elif kind is list or kind is tuple:
        out.append("[")
        for index, item in enumerate(value):
            if index:
                out.append(",")
            _encode(item, out)
        out.append("]")
    elif value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif kind is int and -EXACT_INT_LIMIT < value < EXACT_INT_LIMIT:
        out.append(str(value))
    elif isinstance(value, int | float):
        out.append(number_text(value))
    elif isinstance(value, str):
        out.append(_string(str(value)))
    else:
        raise TypeError(f"{type(value).__name__} is not a JSON value")


# --- Scheme 1 events that PostgreSQL already rewrote ----------------------------------
# Before scheme 2, a float such as 1e16 was hashed as "1e+16" but reads back from
# jsonb as the integer 10000000000000000, and -0.0 as 0.0: the stored event no
# longer hashes to its recorded hash although nobody changed it. Such a number
# has exactly two possible spellings, so a scheme-1 event is also accepted when
# one combination of them matches. Both spellings are the same value: this
# accepts no other content.

MAX_RESPELLINGS = 10  # 2^10 encodings at most per event


def _respellable(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, float):
        return value == 0  # 0.0 may have been -0.0
    if isinstance(value, int) and abs(value) >= 10**16:
        as_float = float(value)
        return math.isfinite(as_float) and int(Decimal(repr(as_float))) == value
    return False


def _respell(value: int | float) -> float:
    if isinstance(value, float):
        return -0.0 if math.copysign(1, value) > 0 else 0.0
    return float(value)


def v1_respellings(value: Any) -> Iterator[bytes]:
    """Every scheme-1 encoding of ``value`` with its jsonb-rewritten numbers spelled back."""
    slots: list[tuple[Any, Any]] = []

    def walk(node: Any, parent: Any, key: Any) -> None:
        if isinstance(node, dict):
            for k, item in node.items():
                walk(item, node, k)
        elif isinstance(node, list):
            for index, item in enumerate(node):
                walk(item, node, index)
        elif parent is not None and _respellable(node):
            slots.append((parent, key))

    walk(value, None, None)
    if not slots or len(slots) > MAX_RESPELLINGS:
        return
    originals = [parent[key] for parent, key in slots]
    try:
        for mask in range(1, 2 ** len(slots)):
            for bit, ((parent, key), original) in enumerate(zip(slots, originals, strict=True)):
                parent[key] = _respell(original) if mask >> bit & 1 else original
            yield canonical_json_v1(value)
    finally:
        for (parent, key), original in zip(slots, originals, strict=True):
            parent[key] = original
