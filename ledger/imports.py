"""CSV exports read into movements: Stripe's dashboard exports (``stripe-csv``) and a plain
format for any processor (``generic-csv``). See docs/reconciliation.md, "CSV imports"."""

from __future__ import annotations

import csv
import datetime as dt
from collections.abc import Iterator
from decimal import Decimal, InvalidOperation

from approvals.money import iso_currency
from rules.money import MINOR_UNITS

from .models import Movement
from .services import Incoming

FORMATS = ("stripe-csv", "generic-csv")
GENERIC_COLUMNS = ("id", "kind", "amount_minor", "currency", "occurred_at")


class BadRow(ValueError):
    """A row that can't be read: its line and the column at fault."""


def _when(text: str, line: int, column: str) -> dt.datetime:
    text = (text or "").strip()
    if text.isdigit():
        return dt.datetime.fromtimestamp(int(text), tz=dt.UTC)
    try:
        value = dt.datetime.fromisoformat(text.replace(" ", "T", 1) if "T" not in text else text)
    except ValueError:
        raise BadRow(f"line {line}: {column}: {text!r} is not a time") from None
    return value if value.tzinfo else value.replace(tzinfo=dt.UTC)


def _currency(text: str, line: int, column: str) -> str:
    code = (text or "").strip().upper()
    if not iso_currency(code):
        raise BadRow(f"line {line}: {column}: {text!r} is not an ISO 4217 code")
    return code


def _major_to_minor(text: str, currency: str, line: int, column: str) -> int:
    try:
        amount = Decimal((text or "").replace(",", "").strip())
    except InvalidOperation:
        raise BadRow(f"line {line}: {column}: {text!r} is not an amount") from None
    minor = amount.scaleb(MINOR_UNITS.get(currency, 2))
    if minor != minor.to_integral_value() or minor == 0:
        raise BadRow(f"line {line}: {column}: {text!r} is not a whole number of minor units")
    return abs(int(minor))


def stripe_rows(reader: csv.DictReader) -> Iterator[Incoming]:
    """Stripe's refunds or payments export: ``id``, ``Amount`` (major units), ``Currency``,
    ``Created (UTC)``, ``Charge ID`` / ``PaymentIntent ID``, ``Status``, and the metadata
    columns ``impri_action_id (metadata)``. ``re_`` ids are refunds, the rest charges."""
    for line, row in enumerate(reader, start=2):
        ident = (row.get("id") or "").strip()
        if not ident:
            raise BadRow(f"line {line}: id: is empty")
        currency = _currency(row.get("Currency", ""), line, "Currency")
        refund = ident.startswith(("re_", "pyr_"))
        intent = (row.get("PaymentIntent ID") or row.get("Payment Intent ID") or "").strip()
        metadata = {
            key[: -len(" (metadata)")]: value
            for key, value in row.items()
            if key and key.endswith(" (metadata)") and value
        }
        yield Incoming(
            source="stripe",
            external_id=ident if refund else (intent or ident),
            kind="refund" if refund else "charge",
            amount_minor=_major_to_minor(row.get("Amount", ""), currency, line, "Amount"),
            currency=currency,
            occurred_at=_when(
                row.get("Created (UTC)") or row.get("Created date (UTC)", ""), line, "Created (UTC)"
            ),
            reference=(row.get("Charge ID") or intent or "").strip(),
            metadata=metadata,
            processor_status=(row.get("Status") or "succeeded").strip().lower(),
        )


def generic_rows(reader: csv.DictReader) -> Iterator[Incoming]:
    """``id,kind,amount_minor,currency,occurred_at[,reference,action_id]``: as the API takes it."""
    missing = [c for c in GENERIC_COLUMNS if c not in (reader.fieldnames or [])]
    if missing:
        raise BadRow(f"line 1: the header lacks {', '.join(missing)}")
    for line, row in enumerate(reader, start=2):
        kind = (row["kind"] or "").strip()
        if kind not in Movement.Kind.values:
            raise BadRow(f"line {line}: kind: {kind!r} is not refund or charge")
        currency = _currency(row["currency"], line, "currency")
        text = (row["amount_minor"] or "").strip()
        if not text.isdigit() or int(text) == 0:
            raise BadRow(f"line {line}: amount_minor: {text!r} is not a positive whole number")
        yield Incoming(
            source="generic-csv",
            external_id=(row["id"] or "").strip(),
            kind=kind,
            amount_minor=int(text),
            currency=currency,
            occurred_at=_when(row["occurred_at"], line, "occurred_at"),
            reference=(row.get("reference") or "").strip(),
            action_id=(row.get("action_id") or "").strip(),
        )


def rows(path: str, fmt: str) -> list[Incoming]:
    """Every row of the file, read before anything is recorded: a bad row records nothing."""
    with open(path, newline="", encoding="utf-8-sig") as handle:
        reader = csv.DictReader(handle)
        return list(stripe_rows(reader) if fmt == "stripe-csv" else generic_rows(reader))
