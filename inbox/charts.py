"""Chart geometry for the dashboard's server-rendered SVG.

Only numbers are computed here; the templates draw them (so every label is
escaped by Django) and inbox.css colours them by class (the CSP allows no
inline style; presentation attributes and classes are fine). Each shape
carries a ``<title>`` so a pointer or a screen reader gets the exact figure.
"""

from __future__ import annotations

from dataclasses import dataclass

from approvals.money import Money

from .dashboard import OUTCOMES, Day

WIDTH = 720
HEIGHT = 200
LEFT = 48  # room for the y-axis labels
BOTTOM = 22  # room for the x-axis labels
TOP = 8
RIGHT = 24  # room for the last day's label


@dataclass(frozen=True)
class Rect:
    x: float
    y: float
    width: float
    height: float
    css: str
    title: str


@dataclass(frozen=True)
class Label:
    x: float
    y: float
    text: str


def nice_max(value: float) -> float:
    """A round axis maximum at or above ``value`` (1, 2, 5 × 10ⁿ)."""
    if value <= 0:
        return 1
    magnitude = 1
    while magnitude * 10 <= value:
        magnitude *= 10
    for step in (1, 2, 5, 10):
        if step * magnitude >= value:
            return step * magnitude
    return 10 * magnitude


def _x_labels(days: list[Day], slot: float) -> list[Label]:
    every = max(1, len(days) // 8)
    labels = []
    for i, day in enumerate(days):
        if i % every == 0 or i == len(days) - 1:
            labels.append(Label(LEFT + slot * (i + 0.5), HEIGHT - 6, day.day.strftime("%b %d")))
    return labels


def _y_labels(top: float, fmt=str) -> list[Label]:
    plot = HEIGHT - BOTTOM - TOP
    return [Label(LEFT - 6, TOP + plot * (1 - f) + 4, fmt(top * f)) for f in (0, 0.5, 1)]


def volume(days: list[Day]) -> dict:
    """Stacked bars: actions pushed per day, split by outcome."""
    top = nice_max(max((d.pushed for d in days), default=0))
    slot = (WIDTH - LEFT - RIGHT) / max(1, len(days))
    plot = HEIGHT - BOTTOM - TOP
    rects = []
    for i, day in enumerate(days):
        y = TOP + plot
        for outcome in OUTCOMES:
            n = day.outcomes.get(outcome, 0)
            if not n:
                continue
            h = plot * n / top
            y -= h
            rects.append(
                Rect(
                    round(LEFT + slot * i + slot * 0.15, 2),
                    round(y, 2),
                    round(slot * 0.7, 2),
                    round(h, 2),
                    f"bar-{outcome}",
                    f"{day.day:%Y-%m-%d}: {n} {outcome}",
                )
            )
    return {
        "rects": rects,
        "x_labels": _x_labels(days, slot),
        "y_labels": _y_labels(top, lambda v: f"{v:g}"),
        "width": WIDTH,
        "height": HEIGHT,
        "baseline": TOP + plot,
        "left": LEFT,
    }


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    if seconds < 36 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def decision_lines(days: list[Day]) -> dict:
    """Two lines over the days: median and p90 time to decision (days without decisions skipped)."""
    top = nice_max(max((d.p90_s or 0 for d in days), default=0))
    slot = (WIDTH - LEFT - RIGHT) / max(1, len(days))
    plot = HEIGHT - BOTTOM - TOP
    series = {}
    for name in ("median", "p90"):
        points = []
        for i, day in enumerate(days):
            value = day.median_s if name == "median" else day.p90_s
            if value is not None:
                x, y = LEFT + slot * (i + 0.5), TOP + plot * (1 - value / top)
                points.append(
                    (round(x, 2), round(y, 2), f"{day.day:%Y-%m-%d}: {name} {duration(value)}")
                )
        series[name] = {
            "points": points,
            "polyline": " ".join(f"{x},{y}" for x, y, _ in points),
        }
    return {
        "series": series,
        "x_labels": _x_labels(days, slot),
        "y_labels": _y_labels(top, duration),
        "width": WIDTH,
        "height": HEIGHT,
        "baseline": TOP + plot,
        "left": LEFT,
    }


def money(minor: int, currency: str) -> str:
    """An amount as the inbox writes every amount: ``$204.00 USD``, ``¥1,200 JPY`` (approvals.money)."""
    return str(Money(minor, currency))


BAR_HEIGHT = 22
NAME_WIDTH = 200


def horizontal(rows: list[tuple[str, str, int, int]], limit: int = 10) -> dict:
    """One bar per (name, currency), the largest first: refunded amounts, scaled per currency."""
    shown = rows[:limit]
    # One scale per currency: a bar of euros is never measured against dollars.
    tops: dict[str, int] = {}
    for _, currency, cents, _ in shown:
        tops[currency] = max(tops.get(currency, 0), cents)
    room = WIDTH - NAME_WIDTH - 120
    bars = []
    for i, (name, currency, cents, count) in enumerate(shown):
        top = tops[currency] or 1
        amount = money(cents, currency)
        bars.append(
            {
                "name": name if len(name) <= 28 else name[:27] + "…",
                "y": i * BAR_HEIGHT,
                "text_y": i * BAR_HEIGHT + 15,
                "width": max(1.0, round(room * cents / top, 2)),
                "amount": amount,
                "amount_x": NAME_WIDTH + max(1.0, round(room * cents / top, 2)) + 6,
                "title": f"{name}: {amount} in {count} refund(s)",
            }
        )
    return {
        "bars": bars,
        "width": WIDTH,
        "height": max(1, len(bars)) * BAR_HEIGHT,
        "name_width": NAME_WIDTH,
        "room": room,  # the longest bar's width: a bar drawn alone is scaled to it
        "more": max(0, len(rows) - limit),
    }
