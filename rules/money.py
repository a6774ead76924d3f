"""Money in an action: what an amount is, where it is, and how it reads.

Pure, like the engine (no database, no settings): the one reading of money that
every guard shares. An action's amounts come from its kind's declaration
(``kinds:`` in the rules file, a gateway tool's ``money:``, or the built-in
``payment.refund`` and ``payment.charge``): the declared paths and nothing else.
A kind that declares nothing falls back to the detector, which finds money by
meaning rather than by one spelling: keys are normalised (Unicode NFKC, format
characters such as zero-width spaces removed, camelCase split, case-folded) and
a key ending in ``cents`` or ``minor``, or with the word ``amount`` in it, is
money; numeric text (``"1.5e5"``, ``"150,000"``) is read as a number. A value
under such a key that cannot be read as a whole number of minor units fails
closed: it counts as over every threshold (``Amount.minor is None``).

See docs/rules.md ("Kinds and money") and docs/security.md.
"""

from __future__ import annotations

import functools
import json
import math
import re
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

from .currencies import ISO_4217, MINOR_UNITS
from .engine import MISSING, lookup

SYMBOLS = {"USD": "$", "EUR": "€", "GBP": "£", "JPY": "¥", "INR": "₹", "KRW": "₩"}
SIGNS = ("positive", "any")
# The largest integer every JSON reader holds exactly (I-JSON, RFC 7493 §2.2).
MAX_EXACT_INTEGER = 2**53 - 1
_WHOLE = re.compile(r"-?[0-9]+")
_NUMERIC_TEXT = re.compile(
    r"[+-]?(?:[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?"
)


@dataclass(frozen=True)
class Money:
    """An amount in minor units and its ISO 4217 currency ("" when none is known)."""

    minor: int | Decimal
    currency: str

    @property
    def exponent(self) -> int:
        return MINOR_UNITS.get(self.currency, 2)

    @property
    def major(self) -> Decimal:
        return Decimal(self.minor).scaleb(-self.exponent)

    def __str__(self) -> str:
        """``$84.00 USD``, ``-$5.00 USD``, ``¥1,200 JPY``, ``84.00`` (no currency known): one way everywhere."""
        major = self.major
        # A fraction of a minor unit is shown in full, never rounded into a plausible figure.
        places = max(self.exponent, -major.as_tuple().exponent) if major == major else 0
        number = f"{abs(major):,.{places}f}"
        sign = "-" if major < 0 else ""
        symbol = SYMBOLS.get(self.currency, "")
        return f"{sign}{symbol}{number} {self.currency}".strip()


def iso_currency(value) -> str:
    """``value`` as an ISO 4217 code ("usd" → "USD"), or "" when it is not one."""
    if isinstance(value, str) and len(value) == 3 and value.isascii() and value.isalpha():
        code = value.upper()
        return code if code in ISO_4217 else ""
    return ""


def minor_units(value) -> int | Decimal | None:
    """An amount in minor units as the payload holds it, read as a number if it is one.

    For display: an integer is the convention; digits as text and a float are
    read too, so the money line still shows what the agent sent.
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return int(value) if value.is_integer() else Decimal(repr(value))
    if isinstance(value, str) and _WHOLE.fullmatch(value.strip()):
        return int(value.strip())
    return None


# --- Declarations -------------------------------------------------------------------------------


@dataclass(frozen=True)
class MoneySpec:
    """One declared amount: where it is, its currency (a path or a fixed code), its unit and sign."""

    amount: str  # a dotted path into the action: payload.amount_cents
    currency: str  # a dotted path (payload.currency) or an ISO 4217 code (USD)
    minor_units: bool = True
    sign: str = "positive"  # positive | any

    def as_dict(self) -> dict:
        out: dict[str, Any] = {"amount": self.amount, "currency": self.currency}
        if not self.minor_units:
            out["minor_units"] = False
        if self.sign != "positive":
            out["sign"] = self.sign
        return out

    @classmethod
    def from_dict(cls, raw: dict) -> MoneySpec:
        return cls(
            amount=raw["amount"],
            currency=raw["currency"],
            minor_units=raw.get("minor_units", True),
            sign=raw.get("sign", "positive"),
        )


def money_spec_problem(raw: Any, root: str = "payload") -> tuple[str, str] | None:
    """Why one ``money`` entry is malformed, as ``(where, problem)``; None when it is fine.

    ``root`` is what paths must start with (``payload``: the rules file's kinds).
    """
    if not isinstance(raw, dict):
        return (
            "",
            "must be a mapping like {amount: payload.amount_cents, currency: payload.currency}",
        )
    unknown = sorted(set(raw) - {"amount", "currency", "minor_units", "sign"})
    if unknown:
        return unknown[0], "unknown key (allowed: amount, currency, minor_units, sign)"
    amount = raw.get("amount")
    if not _is_path(amount, root):
        return "amount", f"must be a dotted path under {root}., e.g. {root}.amount_cents"
    currency = raw.get("currency")
    if not (_is_path(currency, root) or (isinstance(currency, str) and currency in ISO_4217)):
        return "currency", f"must be a path under {root}. or an ISO 4217 code such as USD"
    if not isinstance(raw.get("minor_units", True), bool):
        return "minor_units", "must be true or false"
    if raw.get("sign", "positive") not in SIGNS:
        return "sign", "must be positive or any"
    return None


def _is_path(value: Any, root: str) -> bool:
    return (
        isinstance(value, str)
        and value.startswith(root + ".")
        and len(value) > len(root) + 1
        and ".." not in value
        and not value.endswith(".")
    )


# --- Reading ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Amount:
    """One amount of an action: ``minor`` None means money is there but can't be read (fail closed)."""

    path: str
    minor: int | None
    currency: str
    declared: bool
    sign: str = "positive"
    problem: str = ""  # why it can't be read: 'is the text "1,5 €"'
    raw: Any = field(default=None, compare=False)  # the value as the payload holds it

    @property
    def money(self) -> Money | None:
        return Money(self.minor, self.currency) if self.minor is not None else None

    @property
    def magnitude(self) -> int | None:
        return abs(self.minor) if self.minor is not None else None


def amounts(document: dict, specs: list[MoneySpec] | None) -> list[Amount]:
    """Every amount of ``document`` (``{"payload": …}``): the declared ones, else the detected ones."""
    if specs is None:
        payload = document.get("payload")
        return list(detect(payload)) if isinstance(payload, dict) else []
    return [_declared(document, spec) for spec in specs]


def _declared(document: dict, spec: MoneySpec) -> Amount:
    value = lookup(document, spec.amount)
    currency = _currency_of(document, spec)
    if value is MISSING or value is None:
        return Amount(spec.amount, None, currency, True, spec.sign, "is missing")
    minor = _as_minor(value, currency, spec.minor_units, text=False)
    if minor is None:
        return Amount(spec.amount, None, currency, True, spec.sign, shown(value), value)
    return Amount(spec.amount, minor, currency, True, spec.sign, raw=value)


def _currency_of(document: dict, spec: MoneySpec) -> str:
    if spec.currency in ISO_4217:
        return spec.currency
    return iso_currency(lookup(document, spec.currency))


def _as_minor(value: Any, currency: str, minor_units: bool, *, text: bool) -> int | None:
    """``value`` as a whole number of minor units, or None when it isn't one."""
    number = _decimal(value, text=text)
    if number is None:
        return None
    if not minor_units:
        number = number.scaleb(MINOR_UNITS.get(currency, 2))
    if number != number.to_integral_value():
        return None
    return int(number)


def _decimal(value: Any, *, text: bool) -> Decimal | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, float):
        return Decimal(repr(value)) if math.isfinite(value) else None
    if text and isinstance(value, str):
        cleaned = unicodedata.normalize("NFKC", value).strip()
        if not _NUMERIC_TEXT.fullmatch(cleaned):
            return None
        try:
            number = Decimal(cleaned.replace(",", ""))
        except InvalidOperation:
            return None
        return number if number.is_finite() and abs(number.adjusted()) < 40 else None
    return None


# --- The detector (kinds that declare nothing) --------------------------------------------------

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_NOT_WORD = re.compile(r"[^a-z0-9]+")


def normalize_key(key: Any) -> str:
    """``amountCents``, ``AMOUNT_CENTS``, ``Amount_Cents``, ``amount_cents\\u200b`` → ``amount_cents``."""
    text = unicodedata.normalize("NFKC", str(key))
    text = "".join(ch for ch in text if unicodedata.category(ch) != "Cf")
    text = _CAMEL.sub("_", text).casefold()
    return _NOT_WORD.sub("_", text).strip("_")


def is_money_key(key: Any) -> bool:
    return _is_money_word(str(key))


@functools.lru_cache(maxsize=4096)  # payloads repeat their keys; normalising is the cost
def _is_money_word(key: str) -> bool:
    words = normalize_key(key).split("_")
    return words[-1] in ("cents", "minor") or "amount" in words


def detect(payload: dict) -> Iterator[Amount]:
    """The money in an undeclared payload, by the meaning of its keys (see the module's docstring)."""
    yield from _detect(payload, "payload", "")


def _detect(node: Any, path: str, currency: str) -> Iterator[Amount]:
    if isinstance(node, dict):
        here = _sibling_currency(node) or currency
        for key, value in node.items():
            where = f"{path}.{key}"
            if is_money_key(key) and not isinstance(value, dict | list):
                if value is not None:
                    yield _detected(where, value, here)
            else:
                yield from _detect(value, where, here)
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _detect(value, f"{path}.{index}", currency)


def _sibling_currency(node: dict) -> str:
    for key, value in node.items():
        if _is_currency_word(str(key)):
            return iso_currency(value)
    return ""


@functools.lru_cache(maxsize=4096)
def _is_currency_word(key: str) -> bool:
    return normalize_key(key) in ("currency", "currency_code")


def _detected(path: str, value: Any, currency: str) -> Amount:
    minor = _as_minor(value, currency, True, text=True)
    if minor is None:
        return Amount(path, None, currency, False, "any", shown(value), value)
    return Amount(path, minor, currency, False, "any", raw=value)


def shown(value: Any) -> str:
    """How a value reads in a warning: ``is the text "1,5 €"``, ``is the number 8400.5``."""
    kind = {str: "the text", float: "the number", bool: "the boolean"}.get(type(value), "")
    return f"is {kind} {json.dumps(value, ensure_ascii=False)}".replace("  ", " ")


# --- Guards -------------------------------------------------------------------------------------


def largest(found: list[Amount]) -> Amount | None:
    """The amount a threshold is held against: an unreadable one first (it is over every
    threshold), else the largest in magnitude; None when there is no money."""
    unreadable = [a for a in found if a.minor is None]
    if unreadable:
        return unreadable[0]
    readable = [a for a in found if a.minor is not None]
    return max(readable, key=lambda a: abs(a.minor)) if readable else None


def at_or_above(found: list[Amount], limit: int) -> Amount | None:
    """The amount that reaches ``limit`` (minor units, any currency), or None."""
    top = largest(found)
    if top is None or (top.minor is not None and abs(top.minor) < limit):
        return None
    return top


def above(found: list[Amount], limit: int) -> Amount | None:
    """The amount that passes ``limit``, or None."""
    top = largest(found)
    if top is None or (top.minor is not None and abs(top.minor) <= limit):
        return None
    return top


# --- Validation (declared kinds: push, gateway calls, reviewer edits) ---------------------------


def money_problems(document: dict, specs: list[MoneySpec]) -> list[tuple[str, str]]:
    """Where ``document`` breaks its declared money: ``[(path, problem)]``, empty when it keeps it."""
    out = []
    for spec in specs:
        value = lookup(document, spec.amount)
        currency = _currency_of(document, spec)
        out += _amount_problem(spec, value, currency)
        if spec.currency not in ISO_4217 and not currency:
            out.append((spec.currency, "must be an ISO 4217 currency code such as USD"))
    return out


def _amount_problem(spec: MoneySpec, value: Any, currency: str) -> list[tuple[str, str]]:
    positive = spec.sign == "positive"
    if spec.minor_units:
        wanted = "a positive integer in minor units" if positive else "an integer in minor units"
        ok = isinstance(value, int) and not isinstance(value, bool) and (value > 0 or not positive)
    else:
        unit = currency or "its currency"
        wanted = f"a {'positive ' if positive else ''}amount in {unit} with at most {MINOR_UNITS.get(currency, 2)} decimals"
        minor = None if isinstance(value, str) else _as_minor(value, currency, False, text=False)
        ok = minor is not None and (minor > 0 or not positive)
    if value is MISSING:
        return [(spec.amount, f"is required: {wanted}")]
    return [] if ok else [(spec.amount, f"must be {wanted}")]


def ijson_problem(value: Any, path: str) -> str | None:
    """The first number of ``value`` outside I-JSON (RFC 7493), as ``path: problem``.

    Every JSON reader holds integers up to 2^53 − 1 exactly and every JCS
    library (RFC 8785) encodes them alike; beyond that a payload's hash is
    no longer one that an executor can reproduce.
    """
    stack: list[tuple[Any, str]] = [(value, path)]
    while stack:
        node, where = stack.pop()
        if isinstance(node, bool) or node is None or isinstance(node, str):
            continue
        if isinstance(node, int | float):
            if isinstance(node, float) and not math.isfinite(node):
                return f"{where}: NaN and Infinity are not JSON numbers"
            if abs(node) > MAX_EXACT_INTEGER:
                return (
                    f"{where}: numbers beyond ±(2^53 − 1) are not I-JSON (RFC 7493) and would "
                    "not hash alike everywhere: send it as a string"
                )
        elif isinstance(node, dict):
            stack.extend((item, f"{where}.{key}") for key, item in node.items())
        elif isinstance(node, list):
            stack.extend((item, f"{where}.{index}") for index, item in enumerate(node))
    return None
