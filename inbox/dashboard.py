"""The dashboard's figures for leads and finance: pure reads, one query for any date range.

Every figure is about the actions *pushed* in the range (UTC days, both ends
included), so a day's row never changes once its actions are settled. Counting
and summing happen in SQL (per day, outcome, group, rule, agent, approver);
only people's decision times come back one per action, for the percentiles.
The number of queries does not grow with the range or the data
(bench/dashboard.py and docs/benchmarks.md time 10,000 decided actions).

Definitions (docs/inbox.md):

* outcome: approved (also when the agent then reported executed or failed),
  rejected, expired (an overdue pending action counts as expired before its
  sweep), cancelled, or pending;
* time to decision: push → decision, for actions a person decided; median
  and p90 by the nearest-rank method;
* refunded: the approved amount (the total of the kind's declared amounts: ``approvals.money``)
  of actions whose kind ends in ``refund`` (``payment.refund``, ``psp.refund``)
  that the agent reported ``executed``, by currency, and by the rule that
  routed it, the agent, and who approved it (a reviewer, or ``rule: <name>``);
* stale: approved actions flagged because no result came within
  ``IMPRI_REPORT_DEADLINE_S`` and still without one.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC as utc
from datetime import date, datetime, time, timedelta

from django.db.models import (
    CharField,
    Count,
    F,
    FloatField,
    Func,
    Q,
    Sum,
)
from django.utils import timezone

from approvals.models import Action, ActionStatus

REFUND_SUFFIX = "refund"  # payment.refund, psp.refund, mcp.stripe.create_refund
OUTCOMES = ("approved", "rejected", "changes_requested", "expired", "cancelled", "pending")
MAX_DAYS = 366
STALE_SHOWN = 20


@dataclass
class Day:
    day: date
    outcomes: Counter = field(default_factory=Counter)
    decision_s: list[float] = field(default_factory=list)
    refunded: Counter = field(default_factory=Counter)  # currency -> cents

    @property
    def pushed(self) -> int:
        return sum(self.outcomes.values())

    @property
    def median_s(self) -> float | None:
        return percentile(self.decision_s, 50)

    @property
    def p90_s(self) -> float | None:
        return percentile(self.decision_s, 90)


@dataclass
class Stale:
    action_id: str
    title: str
    agent: str
    approved_at: datetime


@dataclass
class Figures:
    since: date
    until: date
    days: list[Day]
    decision_s: list[float]
    # dimension ("rule", "agent", "reviewer") -> (name, currency) -> [cents, count]
    refunded: dict[str, dict[tuple[str, str], list[int]]]
    expired_by_group: Counter
    stale: list[Stale]
    stale_count: int

    @property
    def totals(self) -> Counter:
        total = Counter()
        for day in self.days:
            total.update(day.outcomes)
        return total

    @property
    def pushed(self) -> int:
        return sum(day.pushed for day in self.days)

    @property
    def expired_rows(self) -> list[tuple[str, int]]:
        return sorted(self.expired_by_group.items(), key=lambda item: (-item[1], item[0]))

    @property
    def median_s(self) -> float | None:
        return percentile(self.decision_s, 50)

    @property
    def p90_s(self) -> float | None:
        return percentile(self.decision_s, 90)

    @property
    def refunded_total(self) -> dict[str, int]:
        total: Counter = Counter()
        for (_, currency), (cents, _) in self.refunded["agent"].items():
            total[currency] += cents
        return dict(sorted(total.items()))

    def refunded_rows(self, dimension: str) -> list[tuple[str, str, int, int]]:
        """(name, currency, cents, count), the largest first."""
        rows = [(n, c, cents, count) for (n, c), (cents, count) in self.refunded[dimension].items()]
        return sorted(rows, key=lambda r: (-r[2], r[0], r[1]))


def percentile(values: list[float], p: int) -> float | None:
    """Nearest rank: the smallest value with at least p% of the values at or below it."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def outcome_of(status: str) -> str:
    """The decision an action got (an overdue pending action is counted expired by the caller)."""
    if status in (ActionStatus.EXECUTED, ActionStatus.FAILED):
        return "approved"
    return status


def day_bounds(since: date, until: date) -> tuple[datetime, datetime]:
    start = datetime.combine(since, time.min, tzinfo=utc)
    return start, datetime.combine(until + timedelta(days=1), time.min, tzinfo=utc)


class UtcDay(Func):
    """The UTC day of a timestamp as ``YYYY-MM-DD`` text, in native SQL on both databases.

    Django's TruncDate on SQLite calls a Python function per row; SQLite stores
    timestamps as UTC text, so the day is its first ten characters.
    """

    output_field = CharField()

    def as_sqlite(self, compiler, connection, **extra):
        return self.as_sql(compiler, connection, template="substr(%(expressions)s, 1, 10)", **extra)

    def as_postgresql(self, compiler, connection, **extra):
        template = "to_char(%(expressions)s AT TIME ZONE 'UTC', 'YYYY-MM-DD')"
        return self.as_sql(compiler, connection, template=template, **extra)


class SecondsBetween(Func):
    """``end - start`` in seconds as a float, in native SQL (no per-row Python on SQLite)."""

    output_field = FloatField()
    arity = 2

    def _compiled(self, compiler):
        (end, end_params), (start, start_params) = (
            compiler.compile(e) for e in self.get_source_expressions()
        )
        return end, start, [*end_params, *start_params]

    def as_sqlite(self, compiler, connection, **extra):
        end, start, params = self._compiled(compiler)
        return f"((julianday({end}) - julianday({start})) * 86400.0)", params

    def as_postgresql(self, compiler, connection, **extra):
        end, start, params = self._compiled(compiler)
        return f"EXTRACT(EPOCH FROM ({end} - {start}))::float8", params


def figures(since: date, until: date, now: datetime | None = None) -> Figures:
    """Every figure of the dashboard for actions pushed from ``since`` to ``until`` (UTC days).

    Five queries whatever the range or the data: outcomes counted per day in
    SQL, people's decision times (for the percentiles), refunds summed per day
    and per name in SQL, and the oldest stale approvals.
    """
    now = now or timezone.now()
    start, end = day_bounds(since, until)
    days = {
        since + timedelta(days=n): Day(since + timedelta(days=n))
        for n in range((until - since).days + 1)
    }
    in_range = Action.objects.filter(created_at__gte=start, created_at__lt=end).order_by()
    counted = _outcomes(in_range, days, now)
    decision_s = _decision_times(in_range, days)
    refunded = _refunds(in_range, days)
    stale = [
        Stale(*row)
        for row in in_range.filter(status=ActionStatus.APPROVED, stale_flagged_at__isnull=False)
        .order_by("decided_at", "pk")
        .values_list("pk", "title", "agent__name", "decided_at")[:STALE_SHOWN]
    ]
    return Figures(
        since=since,
        until=until,
        days=list(days.values()),
        decision_s=decision_s,
        refunded=refunded,
        expired_by_group=counted["expired_by_group"],
        stale=stale,
        stale_count=counted["stale"],
    )


def _outcomes(in_range, days: dict[date, Day], now: datetime) -> dict:
    rows = (
        in_range.annotate(
            day=UtcDay("created_at"),
            overdue=Q(status=ActionStatus.PENDING, expires_at__lte=now),
            stale=Q(status=ActionStatus.APPROVED, stale_flagged_at__isnull=False),
        )
        .values_list("day", "status", "overdue", "stale", "review_group__name")
        .annotate(n=Count("pk"))
    )
    expired_by_group: Counter = Counter()
    stale = 0
    for day, status, overdue, is_stale, group, n in rows:
        day = date.fromisoformat(day)
        outcome = "expired" if overdue else outcome_of(status)
        days[day].outcomes[outcome] += n
        if outcome == "expired":
            expired_by_group[group or "(none)"] += n
        stale += n if is_stale else 0
    return {"expired_by_group": expired_by_group, "stale": stale}


def _decision_times(in_range, days: dict[date, Day]) -> list[float]:
    rows = in_range.filter(decided_by_user__isnull=False, decided_at__isnull=False).values_list(
        UtcDay("created_at"), SecondsBetween("decided_at", "created_at")
    )
    everything: list[float] = []
    for day, took in rows:
        seconds = round(took, 3)  # julianday's doubles carry sub-millisecond noise
        days[date.fromisoformat(day)].decision_s.append(seconds)
        everything.append(seconds)
    return everything


def _refunds(in_range, days: dict[date, Day]) -> dict[str, dict[tuple[str, str], list[int]]]:
    """Executed refunds summed in SQL: per day and currency, then per rule, agent and approver.

    Two small GROUP BYs rather than one over every column, whose groups would
    be nearly as many as the refunds. The amount is the one every money guard
    reads (``Action.amount_minor``: the total of the kind's declared amounts, e.g.
    a ``psp.refund``'s ``payload.amount``; none for a kind that declares no money, or
    what the detector found with ``IMPRI_UNDECLARED_KINDS=detect``), kept in step
    with the approved payload; only amounts above zero count.
    """
    refunds = in_range.filter(
        kind__endswith=REFUND_SUFFIX, status=ActionStatus.EXECUTED, amount_minor__gt=0
    ).annotate(currency=F("amount_currency"))
    total = {"cents": Sum("amount_minor"), "n": Count("pk")}
    for day, currency, cents, _ in refunds.values_list(UtcDay("created_at"), "currency").annotate(
        **total
    ):
        days[date.fromisoformat(day)].refunded[(currency or "").upper()[:8]] += cents
    refunded: dict[str, dict] = {
        d: defaultdict(lambda: [0, 0]) for d in ("rule", "agent", "reviewer")
    }
    by_name = refunds.values_list(
        "rule_name", "agent__name", "decided_by_user__username", "decided_by_rule", "currency"
    ).annotate(**total)
    for rule_name, agent, reviewer, by_rule, currency, cents, n in by_name:
        money = (currency or "").upper()[:8]
        by = reviewer or f"rule: {by_rule or rule_name or '(default)'}"
        for dimension, name in (
            ("rule", rule_name or "(default)"),
            ("agent", agent),
            ("reviewer", by),
        ):
            entry = refunded[dimension][name, money]
            entry[0] += cents
            entry[1] += n
    return {k: dict(v) for k, v in refunded.items()}


def can_see(user) -> bool:
    """Leads and finance: staff, or anyone granted ``approvals.view_dashboard`` (e.g. via a group)."""
    return user.is_active and (user.is_staff or user.has_perm("approvals.view_dashboard"))
