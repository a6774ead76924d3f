"""The detector: money in a payload whose kind declares none, found by the meaning of its keys.

Since the closed world (issue 39) it guards nothing by default: a kind that
declares no money is held to the strictest guard (``IMPRI_UNDECLARED_KINDS=strict``)
and the detector only shows a reviewer what it finds, marked "not declared". With
``IMPRI_UNDECLARED_KINDS=detect`` (a migration period) the guards read it as before.

Keys are normalised (Unicode NFKC; format characters, combining marks and
variation selectors removed; camelCase split; case-folded). A key is money when
it ends in ``cents`` or ``minor``, or holds a money word (``amount``, ``amt``,
``total``, ``price``, ``fee``, ``montant``…), also run together
(``refundamount``, ``amountcents``). Below a money key everything numeric is
money, so the money objects of payment APIs are read: Stripe's
``{"amount": 1500, "currency": "usd"}``, Adyen's ``{"amount": {"value": 150000,
"currency": "EUR"}}``, PayPal's ``{"amount": {"value": "1500.00",
"currency_code": "USD"}}``, Braintree's ``{"amount": "10.00"}``, and lists
(``{"amount": [150000]}``). A whole number (or whole-number text) is minor units;
decimal text and a float are major units of the currency (``"1500.00"`` USD is
150,000 minor units) unless the key says cents (``amount_cents``), and a figure
with more decimals than its unit has can't be read (fail closed: over every
threshold).
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Iterator
from typing import Any

from .currencies import MINOR_UNITS
from .money import MAX_EXACT_INTEGER, Amount, decimal_of, iso_currency, shown

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_NOT_WORD = re.compile(r"[^a-z0-9]+")
_DROPPED = ("Cf", "Mn", "Me")  # format characters, combining marks, variation selectors
MONEY_WORDS = frozenset(
    [
        "amount",
        "amounts",
        "amt",
        "total",
        "totals",
        "subtotal",
        "price",
        "fee",
        "fees",
        "tip",
        "cost",
        "sum",
        "montant",
        "betrag",
        "importe",
        "monto",
        "valor",
    ]
)
_RUN_TOGETHER = ("amount", "cents", "minor")
CURRENCY_KEYS = frozenset({"currency", "currency_code", "currencycode", "iso_currency_code"})
VALUE_KEYS = frozenset(
    {"value"}
)  # money inside a money object: Adyen's, PayPal's {value, currency}


def normalize_key(key: Any) -> str:
    """``amountCents``, ``AMOUNT_CENTS``, ``Amount_Cents``, ``amount_cents\\u200b`` → ``amount_cents``."""
    text = unicodedata.normalize("NFKC", str(key))
    text = "".join(ch for ch in text if unicodedata.category(ch) not in _DROPPED)
    text = _CAMEL.sub("_", text).casefold()
    return _NOT_WORD.sub("_", text).strip("_")


def is_money_key(key: Any) -> bool:
    return _is_money_word(str(key))


@functools.lru_cache(maxsize=4096)  # payloads repeat their keys; normalising is the cost
def _is_money_word(key: str) -> bool:
    normal = normalize_key(key)
    words = normal.split("_")
    if words[-1] in ("cents", "minor") or MONEY_WORDS.intersection(words):
        return True
    joined = normal.replace("_", "")
    return any(word in joined for word in _RUN_TOGETHER)


@functools.lru_cache(maxsize=4096)
def is_currency_key(key: str) -> bool:
    return normalize_key(key) in CURRENCY_KEYS


def may_be_currency(key: Any, value: Any) -> bool:
    """A field an undeclared kind's currency may be in, which an edit may never change: a key
    that names a currency in any spelling (``currency_iso_code``, ``currencyIsoCode``,
    ``settlement_currency``, ``ccy``, ``settleCcy``) or a value that is an ISO 4217 code."""
    joined = normalize_key(key).replace("_", "")
    return "currenc" in joined or joined.endswith("ccy") or bool(iso_currency(value))


def detect(payload: dict[str, Any]) -> Iterator[Amount]:
    """The money in an undeclared payload, by the meaning of its keys (see the module's docstring)."""
    yield from _detect(payload, "payload", "", False)


def _detect(node: Any, path: str, currency: str, under_money: bool) -> Iterator[Amount]:
    if isinstance(node, dict):
        here = _sibling_currency(node) or currency
        money_object = any(is_currency_key(str(key)) for key in node)
        for key, value in node.items():
            if is_currency_key(str(key)):
                continue
            named = is_money_key(key) or (money_object and normalize_key(key) in VALUE_KEYS)
            where = f"{path}.{key}"
            if isinstance(value, dict | list):
                yield from _detect(value, where, here, under_money or named)
            elif value is None:
                continue
            elif named or (under_money and decimal_of(value, text=True) is not None):
                yield _detected(where, value, here, _says_minor(key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            if isinstance(value, dict | list):
                yield from _detect(value, f"{path}.{index}", currency, under_money)
            elif under_money and value is not None:
                yield _detected(f"{path}.{index}", value, currency, False)


def _sibling_currency(node: dict[str, Any]) -> str:
    for key, value in node.items():
        if is_currency_key(str(key)):
            return iso_currency(value)
    return ""


@functools.lru_cache(maxsize=4096)
def _says_minor(key: str) -> bool:
    """``amount_cents``, ``totalMinor``: the key names its unit, so a decimal is a fraction of one."""
    return normalize_key(key).replace("_", "").endswith(("cents", "minor"))


def _detected(path: str, value: Any, currency: str, minor_key: bool) -> Amount:
    minor = _read(value, currency, minor_key)
    if minor is None:
        return Amount(path, None, currency, False, "any", shown(value), value)
    return Amount(path, minor, currency, False, "any", raw=value)


def _read(value: Any, currency: str, minor_key: bool) -> int | None:
    """Whole numbers are minor units; decimal text and floats are major units of ``currency``,
    unless the key says cents (``minor_key``): then a fraction of a cent can't be read."""
    number = decimal_of(value, text=True)
    if number is None:
        return None
    decimals = not minor_key and (
        isinstance(value, float) or (isinstance(value, str) and "." in value)
    )
    if decimals:
        number = number.scaleb(MINOR_UNITS.get(currency, 2))
    if number != number.to_integral_value() or abs(number) > MAX_EXACT_INTEGER:
        return None  # a fraction of a minor unit, or past 2^53 − 1: unreadable (over every limit)
    return int(number) if number.is_finite() else None
