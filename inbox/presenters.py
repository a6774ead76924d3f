"""Shape an action for the reviewer's eyes: money, what will happen, what the agent claims.

Pure functions over an ``Action`` (no queries, no state): the views hand their
results to templates, which escape every string through ``inbox.render``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal

from approvals import money as action_money
from approvals.models import Action
from approvals.money import MINOR_UNITS, SYMBOLS, Amount, Money
from approvals.presenters import amounts_by_path, money_for_path

# What will happen and an edit's bounds are said alike in the inbox, Slack and a push:
# the core's presenters hold them; the inbox's views read them here.
from approvals.presenters import bounds as bounds
from approvals.presenters import outcome as outcome
from approvals.schemas import resolve_path
from rules.money import shown

# Where a figure written in text names its currency (``mentions``).
SYMBOL_CURRENCIES = {"$": "USD", "€": "EUR", "£": "GBP", "¥": "JPY", "₹": "INR", "₩": "KRW"}
WORD_CURRENCIES = {"dollar": "USD", "dollars": "USD", "euro": "EUR", "euros": "EUR"}


def money_fields(action: Action) -> dict[str, Money]:
    """The editable paths that hold one of the action's amounts (in minor units), with its currency."""
    found = amounts_by_path(action)
    out = {}
    for path in action.editable:
        _, value = resolve_path({"payload": action.payload}, path)
        money = money_for_path(action, path, value, found)
        if money is not None:
            out[path] = money
    return out


def money_warnings(action: Action) -> list[str]:
    """Where the action's money can't be read as the guards read it, so nothing slips past unread.

    An amount Impri cannot read (a fraction of a minor unit, text that is not a
    number, a boolean) counts as over every limit (step-up, Slack), and the
    reviewer is told so; so is an amount written other than as an integer,
    one whose currency is unknown, and a negative or zero amount of a kind
    that declares none.
    """
    out = []
    if action_money.is_closed(action):
        out.append(
            f"The kind {action.kind} is not declared (kinds: in the rules file), so Impri can't "
            "know what it moves: it counts as over every limit (step-up, Slack), no rule "
            "approves it, and no number may be raised. Any amount shown is the detector's "
            "guess, not declared"
        )
    for amount in action_money.amounts(action):
        if amount.minor is None:
            out.append(
                f"{amount.path} {amount.problem}: Impri cannot read it as a whole number of "
                "minor units, so it counts as over every limit (step-up, Slack), and the agent "
                "may execute it differently from what you read"
            )
            continue
        if not isinstance(amount.raw, int) or isinstance(amount.raw, bool):
            out.append(
                f"{amount.path} {shown(amount.raw)}: Impri reads it as {amount.minor} minor "
                "units, and the agent may execute it differently from what you read"
            )
        if not amount.currency:
            out.append(
                f"{amount.path} is in no ISO 4217 currency ({_currency_said(action, amount)}): the amount's unit is unknown"
            )
        if not amount.declared and amount.minor <= 0:
            word = "negative" if amount.minor < 0 else "zero"
            out.append(f"{amount.path} is {word}: check what the agent will do with it")
    return out


@dataclass(frozen=True)
class Total:
    """What an action moves in one currency, and the amounts it adds up (several of them)."""

    money: Money
    parts: tuple[tuple[str, Money], ...]


def money_totals(action: Action) -> list[Total]:
    """The action's totals per currency that add up more than one declared amount (the inbox
    shows the total the guards hold, and its parts); none when each currency has one amount,
    and none for a kind that declares no money (the guards hold no figure of it)."""
    if action.money is None:
        return []
    out = []
    for total in action_money.totals(action_money.amounts(action)):
        if total.parts and total.money is not None:
            parts = tuple((a.path, a.money) for a in total.parts if a.money is not None)
            out.append(Total(total.money, parts))
    return out


def _currency_said(action: Action, amount: Amount) -> str:
    """What the payload says the amount's currency is, when it is not an ISO 4217 code."""
    for path in (amount.path.rpartition(".")[0] + ".currency", "payload.currency"):
        found, value = resolve_path({"payload": action.payload}, path)
        if found:
            return f"{path} {shown(value)}, not an ISO 4217 currency code"
    return "the payload names no currency, e.g. payload.currency"


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
    found = amounts_by_path(action)
    for path, value in _walk(action.payload, "payload"):
        _, original = resolve_path({"payload": action.original_payload}, path)
        money = money_for_path(action, path, value, found)
        out.append(Leaf(path, value, original, path in action.editable, money))
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
    """What the agent wrote that disagrees with the amount the reviewer would approve.

    The reviewer approves the payload, not the agent's words: "Refund $8.40"
    over a payload of 840000 cents must never read as harmless. The title and
    the preview are read apart: one that mentions amounts agrees when one of
    them is the payload's amount in its currency, and the others ("of the
    $120.00 order", an earlier refund) are context (``amount_context``). One
    that mentions amounts, none of them the payload's, disagrees: all its
    mentions are listed. A figure a reviewer changed is checked against what
    the agent asked, so a reviewer's own edit is no disagreement.
    """
    agreed = _agreed_amounts(action)
    if not agreed:
        return []
    out = []
    for found in _mentioned(action, preview):
        if not any(_agrees(m, money) for m in found for money in agreed):
            out += found
    return out


def amount_context(action: Action) -> list[Mention]:
    """Amounts the agent mentions beside the payload's own (order totals, earlier refunds)."""
    agreed = _agreed_amounts(action)
    out = []
    for found in _mentioned(action, True):
        if any(_agrees(m, money) for m in found for money in agreed):
            out += [m for m in found if not any(_agrees(m, money) for money in agreed)]
    return out


def _agreed_amounts(action: Action) -> list[Money]:
    """The amounts the agent's words may name: the payload's, and what it asked before a human edit."""
    money = action_money.primary(action)
    if money is None:
        return []
    asked = action_money.primary(action, action.original_payload)
    return [money, asked] if action.edited_by_human and asked is not None else [money]


def _mentioned(action: Action, preview: bool) -> list[list[Mention]]:
    texts = [mentions("title", action.title)]
    if preview:
        texts.append(mentions("preview", action.preview_body))
    return [found for found in texts if found]


def _agrees(mention: Mention, money: Money) -> bool:
    return mention.amount == abs(money.major) and not _other_currency(mention, money)


DOLLAR_CURRENCIES = {"USD", "CAD", "AUD", "NZD", "SGD", "HKD", "MXN"}


def _other_currency(mention: Mention, money: Money) -> bool:
    if not money.currency or mention.currency == money.currency:
        return False
    # "$84" and "84 dollars" may be any dollar; the code, when written, must match.
    loose = mention.text[:1] == "$" or "dollar" in mention.text.lower()
    return not (loose and money.currency in DOLLAR_CURRENCIES)
