"""The canonical JSON encoding of a payload, and its SHA-256.

Impri binds a decision (and its grant) to ``payload_sha256``: the SHA-256 of
the approved payload's canonical JSON. An executor recomputes it from the
payload it is about to execute, so this encoding must be byte for byte the
server's.
"""

from __future__ import annotations

import hashlib
import json
import math
from decimal import Decimal
from typing import Any

__all__ = ["canonical_json", "payload_sha256"]

# Below this, an integral double prints all its digits in ECMAScript form, so an
# integer printed exactly and the equal double encode alike.
EXACT_INT_LIMIT = 10**21


def canonical_json(value: Any) -> bytes:
    """RFC 8785 (JSON Canonicalization Scheme) bytes of ``value``, UTF-8.

    This MUST match the server's ``approvals.digests.payload_sha256`` (see the server's
    docs/ARCHITECTURE.md: hashes are computed over RFC 8785 JSON of the value as stored), and
    ``tests/agents/test_client_canonical.py`` pushes payloads of many number shapes
    to a real server and compares the two hashes. Change both or neither.

    * Object keys sorted by their UTF-16 code units; no insignificant whitespace.
    * Strings escaped as ECMAScript's ``JSON.stringify`` does (``\\n``, ``\\"``,
      other controls as ``\\u00xx``; everything else literal).
    * Floats in ECMAScript's shortest form: ``1.0`` → ``1``, ``1e16`` →
      ``10000000000000000``, ``1e-7`` → ``1e-7``, ``-0.0`` → ``0``. So an
      integral float and the equal integer encode alike, and PostgreSQL's
      ``jsonb`` number normalisation cannot change a hash.
    * Integers below 10^21 in magnitude exactly (RFC 8785 would round those
      beyond 2^53 to a double; an amount must never be rounded). From 10^21 on,
      an integer takes the form of the nearest double, as in RFC 8785: jsonb
      hands a float such as ``1.5e300`` back as a 301-digit integer, and both
      must hash alike.
    """
    return _encode(value).encode("utf-8")


def payload_sha256(payload: Any) -> str:
    """Hex SHA-256 of the payload's canonical JSON: the ``payload_sha256`` Impri reports."""
    return hashlib.sha256(canonical_json(payload)).hexdigest()


def _encode(value: Any) -> str:
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(int(value)) if abs(value) < EXACT_INT_LIMIT else _number(float(value))
    if isinstance(value, float):
        return _number(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, dict):
        for key in value:
            if not isinstance(key, str):
                raise TypeError(f"object keys must be strings, got {key!r}")
        items = sorted(value.items(), key=lambda item: item[0].encode("utf-16-be"))
        return "{" + ",".join(f"{_encode(k)}:{_encode(v)}" for k, v in items) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(_encode(item) for item in value) + "]"
    raise TypeError(f"{type(value).__name__} is not a JSON value")


def _number(x: float) -> str:
    """ECMAScript Number::toString for a finite double (RFC 8785 §3.2.2.3)."""
    if not math.isfinite(x):
        raise ValueError("NaN and Infinity are not JSON numbers")
    if x == 0:
        return "0"  # also -0.0
    sign = "-" if x < 0 else ""
    # repr gives the shortest digits that round-trip, as ECMAScript requires.
    digits_tuple = Decimal(repr(abs(x))).normalize().as_tuple()
    digits = "".join(map(str, digits_tuple.digits))
    k = len(digits)
    n = digits_tuple.exponent + k  # x = 0.digits × 10^n
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
