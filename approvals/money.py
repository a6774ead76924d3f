"""Money in a payload: an amount in minor units (``amount_cents``) and its ISO 4217 currency.

The core's one reading of the money convention: the inbox shows it, notifications
put it in their subject and Slack fields, and both read it here.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from decimal import Decimal

# ISO 4217 minor units that are not 2; everything else has cents.
MINOR_UNITS = {
    **dict.fromkeys(["BIF", "CLP", "DJF", "GNF", "ISK", "JPY", "KMF", "KRW", "PYG"], 0),
    **dict.fromkeys(["RWF", "UGX", "UYI", "VND", "VUV", "XAF", "XOF", "XPF"], 0),
    **dict.fromkeys(["BHD", "IQD", "JOD", "KWD", "LYD", "OMR", "TND"], 3),
    **dict.fromkeys(["CLF", "UYW"], 4),
}
# ISO 4217 currency codes in use (list one, 2025), less the precious metals, the
# bond-market units and the testing and "no currency" codes: what money can be in.
ISO_4217 = frozenset(
    [
        "AED",
        "AFN",
        "ALL",
        "AMD",
        "ANG",
        "AOA",
        "ARS",
        "AUD",
        "AWG",
        "AZN",
        "BAM",
        "BBD",
        "BDT",
        "BGN",
        "BHD",
        "BIF",
        "BMD",
        "BND",
        "BOB",
        "BOV",
        "BRL",
        "BSD",
        "BTN",
        "BWP",
        "BYN",
        "BZD",
        "CAD",
        "CDF",
        "CHE",
        "CHF",
        "CHW",
        "CLF",
        "CLP",
        "CNY",
        "COP",
        "COU",
        "CRC",
        "CUP",
        "CVE",
        "CZK",
        "DJF",
        "DKK",
        "DOP",
        "DZD",
        "EGP",
        "ERN",
        "ETB",
        "EUR",
        "FJD",
        "FKP",
        "GBP",
        "GEL",
        "GHS",
        "GIP",
        "GMD",
        "GNF",
        "GTQ",
        "GYD",
        "HKD",
        "HNL",
        "HTG",
        "HUF",
        "IDR",
        "ILS",
        "INR",
        "IQD",
        "IRR",
        "ISK",
        "JMD",
        "JOD",
        "JPY",
        "KES",
        "KGS",
        "KHR",
        "KMF",
        "KPW",
        "KRW",
        "KWD",
        "KYD",
        "KZT",
        "LAK",
        "LBP",
        "LKR",
        "LRD",
        "LSL",
        "LYD",
        "MAD",
        "MDL",
        "MGA",
        "MKD",
        "MMK",
        "MNT",
        "MOP",
        "MRU",
        "MUR",
        "MVR",
        "MWK",
        "MXN",
        "MXV",
        "MYR",
        "MZN",
        "NAD",
        "NGN",
        "NIO",
        "NOK",
        "NPR",
        "NZD",
        "OMR",
        "PAB",
        "PEN",
        "PGK",
        "PHP",
        "PKR",
        "PLN",
        "PYG",
        "QAR",
        "RON",
        "RSD",
        "RUB",
        "RWF",
        "SAR",
        "SBD",
        "SCR",
        "SDG",
        "SEK",
        "SGD",
        "SHP",
        "SLE",
        "SOS",
        "SRD",
        "SSP",
        "STN",
        "SVC",
        "SYP",
        "SZL",
        "THB",
        "TJS",
        "TMT",
        "TND",
        "TOP",
        "TRY",
        "TTD",
        "TWD",
        "TZS",
        "UAH",
        "UGX",
        "USD",
        "USN",
        "UYI",
        "UYU",
        "UYW",
        "UZS",
        "VED",
        "VES",
        "VND",
        "VUV",
        "WST",
        "XAF",
        "XCD",
        "XCG",
        "XOF",
        "XPF",
        "YER",
        "ZAR",
        "ZMW",
        "ZWG",
    ]
)
SYMBOLS = {"USD": "$", "EUR": "€", "GBP": "£", "JPY": "¥", "INR": "₹", "KRW": "₩"}
_WHOLE = re.compile(r"-?[0-9]+")


@dataclass(frozen=True)
class Money:
    """An amount in minor units and its ISO 4217 currency ("" when the payload has none valid)."""

    minor: int | Decimal
    currency: str

    @property
    def exponent(self) -> int:
        return MINOR_UNITS.get(self.currency, 2)

    @property
    def major(self) -> Decimal:
        return Decimal(self.minor).scaleb(-self.exponent)

    def __str__(self) -> str:
        major = self.major
        # A fraction of a minor unit is shown in full, never rounded into a plausible figure.
        places = max(self.exponent, -major.as_tuple().exponent) if major == major else 0
        number = f"{major:,.{places}f}"
        symbol = SYMBOLS.get(self.currency, "")
        return f"{symbol}{number} {self.currency}".strip()


def iso_currency(value) -> str:
    """``value`` as an ISO 4217 code ("usd" → "USD"), or "" when it is not one."""
    if isinstance(value, str) and len(value) == 3 and value.isascii() and value.isalpha():
        code = value.upper()
        return code if code in ISO_4217 else ""
    return ""


def minor_units(value) -> int | Decimal | None:
    """An amount in minor units as the payload holds it, read as a number if it is one.

    An integer is the convention. Text of digits ("840000") and a float (8400.0,
    8400.5) are read too, so that the money line and the mismatch check still
    work on them; ``money_warnings`` says they break the convention.
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


def payload_money(payload: dict) -> Money | None:
    """The payload's amount, when it follows the ``amount_cents`` + ``currency`` convention."""
    if not isinstance(payload, dict):
        return None
    minor = minor_units(payload.get("amount_cents"))
    if minor is None:
        return None
    return Money(minor, iso_currency(payload.get("currency")))
