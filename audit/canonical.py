"""The byte encodings that audit hashes and payload digests are computed over.

Scheme 2 (the current one) encodes a JSON value by what it *is*, not by how
one writer happened to spell it, so the value a hash was computed over in
memory and the value that reads back from the database encode to the same
bytes. PostgreSQL's ``jsonb`` stores numbers as ``numeric``: ``1e16`` reads
back as ``10000000000000000``, ``-0.0`` as ``0.0``, ``1e-07`` as ``0.0000001``.
Every number is therefore written as its plain decimal value: no exponent, no
trailing zeros after the point, no point when it is whole, no sign on zero. A
float stands for the shortest decimal that reads back as it (Python's
``repr``), which is also what ``json.dumps`` sends to the database. Integers
of any size are exact (the ``rfc8785`` package refuses integers beyond ±2^53,
which ``jsonb`` makes out of floats such as ``1e16``).

Scheme 1 (events written before the change) is plain ``json.dumps`` with
sorted keys; it is kept only to verify those events.
"""

from __future__ import annotations

import json
import math
from decimal import Decimal
from json.encoder import encode_basestring as _string  # json.dumps' own, non-ASCII kept

CURRENT_SCHEME = 2


def canonical_json(value) -> bytes:
    """Scheme 2: sorted keys, ``,``/``:`` separators, UTF-8, numbers by value (see above)."""
    parts: list[str] = []
    _encode(value, parts)
    return "".join(parts).encode("utf-8")


def canonical_json_v1(value) -> bytes:
    """Scheme 1, for events written before scheme 2: number spelling as Python writes it."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode(
        "utf-8"
    )


def number_text(value: int | float) -> str:
    """One string per numeric value: ``1e16``, ``1e+16`` and ``10000000000000000`` alike."""
    if isinstance(value, bool):
        raise TypeError("a boolean is not a number")
    if isinstance(value, int):
        return int.__repr__(value)  # digits, also for an IntEnum
    if not math.isfinite(value):
        raise ValueError(f"{value!r} is not a JSON number")
    if value == 0:
        return "0"  # -0.0 too: jsonb has no negative zero
    text = format(Decimal(repr(value)), "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


def _encode(value, out: list[str]) -> None:
    kind = type(value)
    if kind is str:
        out.append(_string(value))
    elif kind is dict:
        out.append("{")
        first = True
        for key in sorted(value):
            if type(key) is not str:
                raise TypeError(f"object keys must be strings, not {type(key).__name__}")
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
    elif kind is int:
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


def _respellable(value) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, float):
        return value == 0  # 0.0 may have been -0.0
    if isinstance(value, int) and abs(value) >= 10**16:
        as_float = float(value)
        return math.isfinite(as_float) and int(Decimal(repr(as_float))) == value
    return False


def _respell(value):
    if isinstance(value, float):
        return -0.0 if math.copysign(1, value) > 0 else 0.0
    return float(value)


def v1_respellings(value):
    """Every scheme-1 encoding of ``value`` with its jsonb-rewritten numbers spelled back."""
    slots: list[tuple[object, object]] = []

    def walk(node, parent, key):
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
