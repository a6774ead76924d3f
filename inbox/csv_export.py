"""The dashboard as CSV: one row per day, or the refunded amounts by rule, agent and reviewer."""

from __future__ import annotations

import csv

from django.http import HttpResponse

from .dashboard import OUTCOMES, Figures

# A cell a spreadsheet would read as a formula is made text (OWASP's CSV injection advice).
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def cell(value) -> str:
    text = "" if value is None else str(value)
    return "'" + text if text.startswith(FORMULA_START) else text


def seconds(value: float | None) -> str:
    return "" if value is None else f"{value:.0f}"


def response(figures: Figures, export: str) -> HttpResponse:
    name = f"impri-{export}-{figures.since:%Y%m%d}-{figures.until:%Y%m%d}.csv"
    out = HttpResponse(content_type="text/csv; charset=utf-8")
    out["Content-Disposition"] = f'attachment; filename="{name}"'
    writer = csv.writer(out)
    if export == "daily":
        currencies = sorted({c for day in figures.days for c in day.refunded})
        writer.writerow(
            [
                "date",
                "pushed",
                *OUTCOMES,
                "decided_by_people",
                "median_decision_s",
                "p90_decision_s",
            ]
            + [f"refunded_cents_{c or 'unknown'}" for c in currencies]
        )
        for day in figures.days:
            writer.writerow(
                [day.day.isoformat(), day.pushed]
                + [day.outcomes.get(o, 0) for o in OUTCOMES]
                + [len(day.decision_s), seconds(day.median_s), seconds(day.p90_s)]
                + [day.refunded.get(c, 0) for c in currencies]
            )
    else:
        writer.writerow(["by", "name", "currency", "refunded_cents", "refunds"])
        for dimension in ("rule", "agent", "reviewer"):
            for name, currency, cents, count in figures.refunded_rows(dimension):
                writer.writerow([dimension, cell(name), cell(currency), cents, count])
    return out
