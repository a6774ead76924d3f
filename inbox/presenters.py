"""Shape an action for the reviewer's eyes: money, what will happen, what the agent claims.

Pure functions over an ``Action`` (no queries, no state): the views hand their
results to templates, which escape every string through ``inbox.render``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from decimal import Decimal

from approvals.models import Action
from approvals.money import MINOR_UNITS, SYMBOLS, Money, iso_currency, payload_money
from approvals.schemas import resolve_path
from approvals.services.edits import edit_bounds

from .wording import kind_sentence, telling_details

# Where a figure written in text names its currency (``mentions``).
SYMBOL_CURRENCIES = {"$": "USD", "€": "EUR", "£": "GBP", "¥": "JPY", "₹": "INR", "₩": "KRW"}
WORD_CURRENCIES = {"dollar": "USD", "dollars": "USD", "euro": "EUR", "euros": "EUR"}


def money_for_path(action: Action, path: str, value) -> Money | None:
    """A value at a ``…_cents`` path read as money in the payload's currency."""
    if not path.endswith("_cents") or not isinstance(value, int) or isinstance(value, bool):
        return None
    return Money(value, iso_currency((action.payload or {}).get("currency")))


def money_warnings(action: Action) -> list[str]:
    """Where the payload breaks the money convention, so no amount slips past unread.

    A ``…_cents`` value that is not an integer (text, a float, a boolean), and
    a currency that is not an ISO 4217 code: both once disabled the money line
    and the mismatch check without a word.
    """
    payload = action.payload if isinstance(action.payload, dict) else {}
    out = []
    for path, value in _walk(payload, "payload"):
        if path.endswith("_cents") and (isinstance(value, bool) or not isinstance(value, int)):
            out.append(
                f"{path} is {_shown(value)}, not a whole number of minor units: the agent "
                "may execute it differently from what you read"
            )
    cents = any(path.endswith("_cents") for path, _ in _walk(payload, "payload"))
    currency = payload.get("currency")
    if currency is not None and not iso_currency(currency):
        out.append(
            f"payload.currency is {_shown(currency)}, not an ISO 4217 currency code: "
            "the amount is shown without a currency"
        )
    elif currency is None and cents:
        out.append("the payload names no currency (payload.currency): the amount's unit is unknown")
    return out


def _shown(value) -> str:
    kind = {str: "the text", float: "the number", bool: "the boolean"}.get(type(value), "")
    text = json.dumps(value, ensure_ascii=False)
    return f"{kind} {text}".strip()


# --- What will happen -------------------------------------------------------------------------


@dataclass
class Outcome:
    verb: str
    money: Money | None
    order: str | None
    target_url: str
    # Without money: the payload's telling fields, as (label, value), e.g. ("to", "a@b.example").
    details: tuple[tuple[str, str], ...] = ()


def outcome(action: Action) -> Outcome:
    """The payload as a sentence: ``Refund $84.00 USD · order 10432``; without money, ``inbox.wording``."""
    payload = action.payload if isinstance(action.payload, dict) else {}
    money = payload_money(payload)
    order = payload.get("order_id")
    if money is not None:
        verb = action.kind.rsplit(".", 1)[-1].replace("_", " ").replace("-", " ").capitalize()
        details: tuple[tuple[str, str], ...] = ()
    else:
        verb = kind_sentence(action.kind)
        details = telling_details(payload)
    return Outcome(
        verb=verb,
        money=money,
        order=str(order) if isinstance(order, str | int) and not isinstance(order, bool) else None,
        target_url=action.target_url,
        details=details,
    )


def result_by(action: Action) -> str | None:
    """Who executed an action and reported its result: always the agent, never a reviewer."""
    return action.agent.name if action.result_status else None


@dataclass
class Leaf:
    path: str
    value: object
    original: object
    editable: bool
    money: Money | None

    @property
    def changed(self) -> bool:
        return self.value != self.original


def leaves(action: Action) -> list[Leaf]:
    """Every leaf of the payload as ``payload.a.b``, with its original value beside it."""
    out: list[Leaf] = []
    for path, value in _walk(action.payload, "payload"):
        _, original = resolve_path({"payload": action.original_payload}, path)
        out.append(
            Leaf(
                path, value, original, path in action.editable, money_for_path(action, path, value)
            )
        )
    return out


def _walk(node, prefix: str):
    if isinstance(node, dict) and node:
        for key, value in node.items():
            yield from _walk(value, f"{prefix}.{key}")
    elif isinstance(node, list) and node:
        for index, value in enumerate(node):
            yield from _walk(value, f"{prefix}.{index}")
    else:
        yield prefix, node


# --- What the agent claims ----------------------------------------------------------------------

KNOWN_CODES = {
    *SYMBOLS,
    *MINOR_UNITS,
    "AED",
    "AUD",
    "BRL",
    "CAD",
    "CHF",
    "CNY",
    "CZK",
    "DKK",
    "HKD",
    "HUF",
    "ILS",
    "MXN",
    "NOK",
    "NZD",
    "PLN",
    "SAR",
    "SEK",
    "SGD",
    "TRY",
    "ZAR",
}
_NUMBER = r"(?P<whole>\d{1,3}(?:,\d{3})+|\d+)(?:\.(?P<fraction>\d+))?"
_AMOUNT_PATTERNS = [
    re.compile(r"(?P<unit>[$€£¥₹₩])\s?" + _NUMBER),
    re.compile(r"\b(?P<unit>[A-Z]{3})\s?" + _NUMBER),
    re.compile(_NUMBER + r"\s?(?P<unit>[A-Za-z]{3}|dollars?|euros?)\b", re.IGNORECASE),
]


@dataclass(frozen=True)
class Mention:
    where: str
    text: str
    amount: Decimal
    currency: str


def mentions(where: str, text: str) -> list[Mention]:
    """Money amounts written in ``text``: ``$84``, ``USD 84.00``, ``84 euros``."""
    found: dict[tuple[int, int], Mention] = {}
    for pattern in _AMOUNT_PATTERNS:
        for match in pattern.finditer(text or ""):
            currency = _currency(match["unit"])
            if currency and not any(_overlaps(match.span(), span) for span in found):
                amount = Decimal(match["whole"].replace(",", "") + "." + (match["fraction"] or "0"))
                found[match.span()] = Mention(where, match.group(0), amount, currency)
    return [found[span] for span in sorted(found)]


def _currency(unit: str) -> str | None:
    if unit in SYMBOL_CURRENCIES:
        return SYMBOL_CURRENCIES[unit]
    if unit.lower() in WORD_CURRENCIES:
        return WORD_CURRENCIES[unit.lower()]
    return unit.upper() if unit.upper() in KNOWN_CODES else None


def _overlaps(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def amount_mismatches(action: Action, *, preview: bool = True) -> list[Mention]:
    """Amounts the title or preview mention that are not what the agent's payload asks.

    The reviewer approves the payload, not the agent's words: "Refund $8.40"
    over a payload of 840000 cents must never read as harmless.
    """
    # Against what the agent asked: a reviewer's own edit is no disagreement of the agent's words.
    money = payload_money(action.original_payload)
    if money is None:
        return []
    found = mentions("title", action.title)
    if preview:
        found += mentions("preview", action.preview_body)
    return [m for m in found if m.amount != money.major or _other_currency(m, money)]


DOLLAR_CURRENCIES = {"USD", "CAD", "AUD", "NZD", "SGD", "HKD", "MXN"}


def _other_currency(mention: Mention, money: Money) -> bool:
    if not money.currency or mention.currency == money.currency:
        return False
    # "$84" and "84 dollars" may be any dollar; the code, when written, must match.
    loose = mention.text[:1] == "$" or "dollar" in mention.text.lower()
    return not (loose and money.currency in DOLLAR_CURRENCIES)


# --- Edit bounds ----------------------------------------------------------------------------------


@dataclass
class Bound:
    name: str
    value: object
    money: Money | None
    is_original: bool


def bounds(action: Action, path: str) -> list[Bound]:
    """The rule's bounds on ``path`` (``{"min": 1, "max": "original"}``) with ``original`` resolved."""
    spec = edit_bounds(action, path)
    if not isinstance(spec, dict):
        return []
    _, original = resolve_path({"payload": action.original_payload}, path)
    out = []
    for name, raw in spec.items():
        is_original = raw == "original"
        value = original if is_original else raw
        out.append(Bound(name, value, money_for_path(action, path, value), is_original))
    return out
