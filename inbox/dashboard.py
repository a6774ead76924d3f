"""The dashboard's figures for leads and finance: pure reads, one query for any date range.

Every figure is about the actions *pushed* in the range (UTC days, both ends
included), so a day's row never changes once its actions are settled. The
actions are read once, as plain tuples with only the columns the figures need
(the amount comes out of the payload in SQL), and counted here: the number of
queries does not grow with the range or the data, and 10,000 actions stay
well inside the 300 ms budget (bench/dashboard.py, docs/benchmarks.md).

Definitions (docs/inbox.md):

* outcome: approved (also when the agent then reported executed or failed),
  rejected, expired (an overdue pending action counts as expired before its
  sweep), cancelled, or pending;
* time to decision: push → decision, for actions a person decided; median
  and p90 by the nearest-rank method;
* refunded: the approved ``payload.amount_cents`` of ``payment.refund``
  actions the agent reported ``executed``, by currency, and by the rule that
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

from django.db.models.fields.json import KT
from django.utils import timezone

from approvals.models import Action, ActionStatus

REFUND_KIND = "payment.refund"
OUTCOMES = ("approved", "rejected", "expired", "cancelled", "pending")
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


def outcome_of(status: str, expires_at: datetime, now: datetime) -> str:
    if status == ActionStatus.PENDING:
        return "expired" if expires_at <= now else "pending"
    if status in (ActionStatus.EXECUTED, ActionStatus.FAILED):
        return "approved"
    return status


def as_cents(value) -> int | None:
    """The amount as pushed, if it is a whole number of cents (KT gives it back as text)."""
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    if not math.isfinite(number) or number < 0 or number != int(number):
        return None
    return int(number)


def day_bounds(since: date, until: date) -> tuple[datetime, datetime]:
    start = datetime.combine(since, time.min, tzinfo=utc)
    return start, datetime.combine(until + timedelta(days=1), time.min, tzinfo=utc)


COLUMNS = (
    "pk",
    "created_at",
    "status",
    "expires_at",
    "decided_at",
    "decided_by_user__username",
    "decided_by_rule",
    "rule_name",
    "agent__name",
    "kind",
    "review_group__name",
    "stale_flagged_at",
    "title",
    "amount",
    "currency",
)


def figures(since: date, until: date, now: datetime | None = None) -> Figures:
    """Every figure of the dashboard for actions pushed from ``since`` to ``until`` (UTC days)."""
    now = now or timezone.now()
    start, end = day_bounds(since, until)
    days = {
        since + timedelta(days=n): Day(since + timedelta(days=n))
        for n in range((until - since).days + 1)
    }
    rows = (
        Action.objects.filter(created_at__gte=start, created_at__lt=end)
        .order_by()
        .annotate(amount=KT("payload__amount_cents"), currency=KT("payload__currency"))
        .values_list(*COLUMNS)
    )
    decision_s: list[float] = []
    refunded: dict[str, dict] = {
        d: defaultdict(lambda: [0, 0]) for d in ("rule", "agent", "reviewer")
    }
    expired_by_group: Counter = Counter()
    stale: list[Stale] = []
    for (
        pk,
        created_at,
        status,
        expires_at,
        decided_at,
        reviewer,
        decided_by_rule,
        rule_name,
        agent,
        kind,
        group,
        stale_flagged_at,
        title,
        amount,
        currency,
    ) in rows.iterator(chunk_size=2000):
        day = days[created_at.astimezone(utc).date()]
        outcome = outcome_of(status, expires_at, now)
        day.outcomes[outcome] += 1
        if reviewer and decided_at:
            seconds = (decided_at - created_at).total_seconds()
            day.decision_s.append(seconds)
            decision_s.append(seconds)
        if outcome == "expired":
            expired_by_group[group or "(none)"] += 1
        if status == ActionStatus.APPROVED and stale_flagged_at:
            stale.append(Stale(pk, title, agent, decided_at))
        cents = as_cents(amount)
        if kind == REFUND_KIND and status == ActionStatus.EXECUTED and cents is not None:
            money = (currency or "").upper()[:8]
            day.refunded[money] += cents
            by = reviewer or f"rule: {decided_by_rule or rule_name or '(default)'}"
            for dimension, name in (
                ("rule", rule_name or "(default)"),
                ("agent", agent),
                ("reviewer", by),
            ):
                entry = refunded[dimension][name, money]
                entry[0] += cents
                entry[1] += 1
    stale.sort(key=lambda s: (s.approved_at, s.action_id))
    return Figures(
        since=since,
        until=until,
        days=list(days.values()),
        decision_s=decision_s,
        refunded={k: dict(v) for k, v in refunded.items()},
        expired_by_group=expired_by_group,
        stale=stale[:STALE_SHOWN],
        stale_count=len(stale),
    )


def can_see(user) -> bool:
    """Leads and finance: staff, or anyone granted ``approvals.view_dashboard`` (e.g. via a group)."""
    return user.is_active and (user.is_staff or user.has_perm("approvals.view_dashboard"))
