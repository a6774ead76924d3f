"""Money in an action: what an amount is, where it is, and how it reads.

Pure, like the engine (no database, no settings): the one reading of money that
every guard shares. An action's amounts come from its kind's declaration
(``kinds:`` in the rules file, a gateway tool's ``money:``, or the built-in
``payment.refund`` and ``payment.charge``): the declared paths and nothing else.
A path may name each element of a list (``payload.lines.*.amount_cents``); an
amount is in minor units (a JSON integer) or, with ``minor_units: false``, in
major units (a JSON number or decimal text such as ``"1500.00"``, at most the
currency's decimals). An action's money is its total per currency (``totals``):
every threshold is held against it, each currency on its own.

A kind that declares nothing moves an unknown amount (``unknown_amount``: the
closed world, ``approvals.money``); the detector (``rules.detector``) still
reads such a payload, for display. A value that cannot be read as a whole
number of minor units fails closed: it counts as over every threshold
(``Amount.minor is None``).

See docs/rules.md ("Kinds and money") and docs/security.md.
"""

from __future__ import annotations

import json
import math
import re
import unicodedata
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any, TypeGuard

from .currencies import ISO_4217, MINOR_UNITS
from .engine import MISSING, lookup
from .paths import WILDCARD, path_problem

SYMBOLS = {"USD": "$", "EUR": "€", "GBP": "£", "JPY": "¥", "INR": "₹", "KRW": "₩"}
SIGNS = ("positive", "any")
# The largest integer every JSON reader holds exactly (I-JSON, RFC 7493 §2.2).
MAX_EXACT_INTEGER = 2**53 - 1
TOO_LARGE = "more than 2^53 − 1 minor units"
_WHOLE = re.compile(r"-?[0-9]+")
# A declared amount in major units as text: "1500.00", "-5", never "1,500", "1e3" or "+5".
_DECIMAL_TEXT = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?")
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
        exponent = major.as_tuple().exponent  # a letter for NaN and infinity
        places = max(self.exponent, -exponent) if isinstance(exponent, int) else 0
        number = f"{abs(major):,.{places}f}"
        sign = "-" if major < 0 else ""
        symbol = SYMBOLS.get(self.currency, "")
        return f"{sign}{symbol}{number} {self.currency}".strip()


def iso_currency(value: Any) -> str:
    """``value`` as an ISO 4217 code ("usd" → "USD"), or "" when it is not one."""
    if isinstance(value, str) and len(value) == 3 and value.isascii() and value.isalpha():
        code = value.upper()
        return code if code in ISO_4217 else ""
    return ""


def minor_units(value: Any) -> int | Decimal | None:
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

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"amount": self.amount, "currency": self.currency}
        if not self.minor_units:
            out["minor_units"] = False
        if self.sign != "positive":
            out["sign"] = self.sign
        return out

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> MoneySpec:
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
        return "amount", _path_words(root, amount)
    currency = raw.get("currency")
    if not (_is_path(currency, root) or (isinstance(currency, str) and currency in ISO_4217)):
        return "currency", f"must be a path under {root}. or an ISO 4217 code such as USD"
    if currency.split(".").count(WILDCARD) > amount.split(".").count(WILDCARD):
        return "currency", "may use * only where amount does (payload.lines.*.currency)"
    if not isinstance(raw.get("minor_units", True), bool):
        return "minor_units", "must be true or false"
    if raw.get("sign", "positive") not in SIGNS:
        return "sign", "must be positive or any"
    return None


def _is_path(value: Any, root: str, *, wildcard: bool = True) -> TypeGuard[str]:
    return (
        isinstance(value, str)
        and value.startswith(root + ".")
        and len(value) > len(root) + 1
        and ".." not in value
        and not value.endswith(".")
        and path_problem(value, wildcard=wildcard) is None
    )


def _path_words(root: str, value: Any) -> str:
    problem = path_problem(value, wildcard=True) if isinstance(value, str) else None
    if problem:
        return problem
    return f"must be a dotted path under {root}., e.g. {root}.amount_cents ({root}.lines.*.amount_cents for each element of a list)"


# --- Reading ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Amount:
    """One amount of an action: ``minor`` None means money is there but can't be read (fail closed).

    ``parts``: a total's amounts (``totals``). ``undeclared_kind``: the amount stands for a
    kind that declares no money (strict): unknown, so over every threshold.
    """

    path: str
    minor: int | None
    currency: str
    declared: bool
    sign: str = "positive"
    problem: str = ""  # why it can't be read: 'is the text "1,5 €"'
    raw: Any = field(default=None, compare=False)  # the value as the payload holds it
    parts: tuple[Amount, ...] = field(default=(), compare=False)
    undeclared_kind: str = ""

    @property
    def money(self) -> Money | None:
        return Money(self.minor, self.currency) if self.minor is not None else None

    @property
    def magnitude(self) -> int | None:
        return abs(self.minor) if self.minor is not None else None


def unknown_amount(kind: str) -> Amount:
    """What a kind that declares no money moves, as the strict guards hold it: unknown."""
    return Amount(
        "kind",
        None,
        "",
        False,
        "any",
        f"is {kind!r}, which declares no money (kinds: in the rules file), so the amount it "
        "moves is unknown",
        undeclared_kind=kind,
    )


def amounts(document: dict[str, Any], specs: list[MoneySpec] | None) -> list[Amount]:
    """Every amount of ``document`` (``{"payload": …}``): the declared ones, else the detected ones."""
    if specs is None:
        # deferred: rules.detector imports Amount from this module
        from .detector import detect  # the detector reads Amount from here

        payload = document.get("payload")
        return list(detect(payload)) if isinstance(payload, dict) else []
    return [amount for spec in specs for amount in _declared(document, spec)]


def expand(document: dict[str, Any], spec: MoneySpec) -> list[tuple[str, str]]:
    """The declaration's ``(amount path, currency path or code)`` pairs in ``document``.

    A ``*`` stands for each element of a list (``payload.lines.*.amount_cents``); a currency
    path with ``*`` takes the same elements. Not a list where a ``*`` is: the declared path
    itself, which reads as missing.
    """
    found: list[tuple[str, Any, list[int]]] = [("", document, [])]
    for part in spec.amount.split("."):
        step = []
        for prefix, node, chosen in found:
            where = f"{prefix}.{part}" if prefix else part
            if part != WILDCARD:
                step.append((where, lookup(node, part) if node is not MISSING else MISSING, chosen))
            elif isinstance(node, list):
                step += [(f"{prefix}.{i}", item, [*chosen, i]) for i, item in enumerate(node)]
            else:
                return [(spec.amount, spec.currency)]
        found = step
    return [(path, _with_indices(spec.currency, chosen)) for path, _, chosen in found]


def _with_indices(path: str, chosen: list[int]) -> str:
    parts = path.split(".")
    stars = [i for i, part in enumerate(parts) if part == WILDCARD]
    for position, index in zip(stars, chosen, strict=False):
        parts[position] = str(index)
    return ".".join(parts)


def _declared(document: dict[str, Any], spec: MoneySpec) -> list[Amount]:
    out = []
    for path, currency_at in expand(document, spec):
        value = lookup(document, path) if WILDCARD not in path.split(".") else MISSING
        currency = _currency_at(document, currency_at)
        if value is MISSING or value is None:
            out.append(Amount(path, None, currency, True, spec.sign, "is missing"))
            continue
        minor = declared_minor(value, currency, spec.minor_units)
        if minor is None:
            out.append(Amount(path, None, currency, True, spec.sign, shown(value), value))
        else:
            out.append(Amount(path, minor, currency, True, spec.sign, raw=value))
    return out


def _currency_at(document: dict[str, Any], currency: str) -> str:
    if currency in ISO_4217:
        return currency
    return iso_currency(lookup(document, currency))


def declared_minor(value: Any, currency: str, minor_units: bool) -> int | None:
    """A declared amount in minor units, or None when it isn't one.

    ``minor_units``: a JSON integer (a float that is whole reads too, for display; a push
    refuses it). Else major units: a JSON number or decimal text (``"1500.00"``) with at
    most the currency's decimals.
    """
    if isinstance(value, str):
        if minor_units or not _DECIMAL_TEXT.fullmatch(value):
            return None
        number: Decimal | None = Decimal(value)
    else:
        number = decimal_of(value, text=False)
    if number is None:
        return None
    if not minor_units:
        number = number.scaleb(MINOR_UNITS.get(currency, 2))
    if number != number.to_integral_value() or abs(number) > MAX_EXACT_INTEGER:
        return None  # past 2^53 − 1 minor units no column or JSON reader holds it: unreadable
    return int(number)


def decimal_of(value: Any, *, text: bool) -> Decimal | None:
    """``value`` as a number: a JSON number, or with ``text`` numeric text (``"150,000"``)."""
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


def shown(value: Any) -> str:
    """How a value reads in a warning: ``is the text "1,5 €"``, ``is the number 8400.5``."""
    kind = {str: "the text", float: "the number", bool: "the boolean"}.get(type(value), "")
    return f"is {kind} {json.dumps(value, ensure_ascii=False)}".replace("  ", " ")


# --- Guards: an action's money is its total per currency ------------------------------------------


def totals(found: list[Amount]) -> list[Amount]:
    """What the action moves, per currency: the sum of its readable amounts' magnitudes.

    One amount in a currency is itself; several are one Amount whose ``parts`` they are
    (ten lines of 99,999 are 999,990). Currencies are never added together: each total
    is held to a threshold on its own. Unreadable amounts are left out (see ``largest``);
    a total past 2^53 − 1 minor units is itself unreadable (``minor`` None: over every
    threshold, and no amount column overflows).
    """
    by_currency: dict[str, list[Amount]] = {}
    for amount in found:
        if amount.minor is not None:
            by_currency.setdefault(amount.currency, []).append(amount)
    return [_total(group) if len(group) > 1 else group[0] for group in by_currency.values()]


def _total(group: list[Amount]) -> Amount:
    magnitude = sum(abs(a.minor or 0) for a in group)
    negative = all((a.minor or 0) < 0 for a in group)
    path = f"{group[0].path} + {len(group) - 1} more (the total)"
    signs = {a.sign for a in group}
    return Amount(
        path,
        (-magnitude if negative else magnitude) if magnitude <= MAX_EXACT_INTEGER else None,
        group[0].currency,
        all(a.declared for a in group),
        signs.pop() if len(signs) == 1 else "any",
        f"adds up to {TOO_LARGE}" if magnitude > MAX_EXACT_INTEGER else "",
        parts=tuple(group),
    )


def largest(found: list[Amount]) -> Amount | None:
    """The amount a threshold is held against: an unreadable one first (it is over every
    threshold), else the largest total of a currency; None when there is no money."""
    unreadable = [a for a in found if a.minor is None]
    if unreadable:
        return unreadable[0]
    readable = totals(found)
    unreadable = [a for a in readable if a.minor is None]  # a total past 2^53 − 1
    if unreadable:
        return unreadable[0]
    return max(readable, key=lambda a: abs(a.minor or 0)) if readable else None


def at_or_above(found: list[Amount], limit: int) -> Amount | None:
    """The total (or unreadable amount) that reaches ``limit`` in its currency, or None."""
    top = largest(found)
    if top is None or (top.minor is not None and abs(top.minor) < limit):
        return None
    return top


def above(found: list[Amount], limit: int) -> Amount | None:
    """The total (or unreadable amount) that passes ``limit`` in its currency, or None."""
    top = largest(found)
    if top is None or (top.minor is not None and abs(top.minor) <= limit):
        return None
    return top


# --- Validation (declared kinds: push, gateway calls, reviewer edits) ---------------------------


def money_problems(document: dict[str, Any], specs: list[MoneySpec]) -> list[tuple[str, str]]:
    """Where ``document`` breaks its declared money: ``[(path, problem)]``, empty when it keeps it."""
    out = []
    for spec in specs:
        for path, currency_at in expand(document, spec):
            value = lookup(document, path) if WILDCARD not in path.split(".") else MISSING
            currency = _currency_at(document, currency_at)
            out += _amount_problem(spec, path, value, currency)
            if currency_at not in ISO_4217 and not currency:
                out.append((currency_at, "must be an ISO 4217 currency code such as USD"))
    if not out:
        out += [
            (total.parts[0].path, f"with the others in {total.currency} {total.problem}")
            for total in totals(amounts(document, specs))
            if total.minor is None
        ]
    return out


def currency_paths(document: dict[str, Any], specs: list[MoneySpec]) -> set[str]:
    """The payload paths a declaration reads currencies from (what an edit may never change)."""
    return {
        currency
        for spec in specs
        for _, currency in expand(document, spec)
        if currency not in ISO_4217
    }


def _amount_problem(spec: MoneySpec, path: str, value: Any, currency: str) -> list[tuple[str, str]]:
    positive = spec.sign == "positive"
    if spec.minor_units:
        wanted = "a positive integer in minor units" if positive else "an integer in minor units"
        ok = isinstance(value, int) and not isinstance(value, bool) and (value > 0 or not positive)
    else:
        unit = currency or "its currency"
        wanted = (
            f"a {'positive ' if positive else ''}amount in {unit} (a number or decimal text "
            f'such as "1500.00") with at most {MINOR_UNITS.get(currency, 2)} decimals'
        )
        minor = declared_minor(value, currency, False)
        ok = minor is not None and (minor > 0 or not positive)
        if not ok and _beyond_exact(value, currency):
            return [(path, f"is {TOO_LARGE}: no amount column or JSON reader holds it exactly")]
    if value is MISSING:
        return [(path, f"is required: {wanted}")]
    return [] if ok else [(path, f"must be {wanted}")]


def _beyond_exact(value: Any, currency: str) -> bool:
    """A major-unit amount that reads as a number but passes 2^53 − 1 minor units."""
    if isinstance(value, str):
        number = Decimal(value) if _DECIMAL_TEXT.fullmatch(value) else None
    else:
        number = decimal_of(value, text=False)
    return (
        number is not None and abs(number.scaleb(MINOR_UNITS.get(currency, 2))) > MAX_EXACT_INTEGER
    )


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
