"""Dry runs: what a candidate rule set would do to one action, or to past actions.

The past actions are the caller's to give (``backtest(rules, history)``): rules
never import the approvals app, which depends on them. ``past_actions`` reads
them through the function ``settings.IMPRI_BACKTEST_HISTORY`` names
(``approvals.history.past_action_views``).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.utils import timezone
from django.utils.module_loading import import_string

from . import engine
from .services import budget_amount, budget_scope, window_start

# One past action as the rules saw it when it was pushed: when, and the view
# ``engine.evaluate`` takes (kind, agent, agent_id, payload, flags, context).
PastAction = tuple[datetime, dict]
# What "auto-approved amount" adds up, unless the caller names another path.
AMOUNT_PATH = "payload.amount_cents"


def past_actions(since: datetime | None) -> Iterable[PastAction]:
    """The actions pushed since ``since`` (all: None), oldest first, for ``backtest``."""
    return import_string(settings.IMPRI_BACKTEST_HISTORY)(since)


@dataclass
class BacktestReport:
    since: datetime | None
    actions: int = 0
    outcomes: Counter = field(default_factory=Counter)
    auto_approved_amount: Decimal = Decimal(0)
    sent_to_review_by_budget: int = 0
    by_rule: Counter = field(default_factory=Counter)

    def as_text(self, amount_path: str) -> str:
        lines = [
            f"Replayed {self.actions} action(s)"
            + (f" since {self.since:%Y-%m-%d %H:%M} UTC" if self.since else ""),
            f"  auto_approve: {self.outcomes['auto_approve']}",
            f"  auto_reject:  {self.outcomes['auto_reject']}",
            f"  review:       {self.outcomes['review']}"
            + (
                f" ({self.sent_to_review_by_budget} over a budget)"
                if self.sent_to_review_by_budget
                else ""
            ),
            f"  total auto-approved ({amount_path}): {_plain(self.auto_approved_amount)}",
            "By rule:",
        ]
        lines += [
            f"  {name or '(default)'}: {count}"
            for name, count in sorted(self.by_rule.items(), key=_key)
        ]
        return "\n".join(lines)


def _key(item):
    return (item[0] is None, item[0] or "")


def _plain(value: Decimal) -> str:
    return format(value.normalize(), "f") if value else "0"


def backtest(
    rules: list[engine.Rule],
    history: Iterable[PastAction],
    since: datetime | None = None,
    amount_path: str = AMOUNT_PATH,
) -> BacktestReport:
    """Replay ``history`` (oldest first) through ``rules``; budgets are simulated in memory.

    ``since`` only labels the report: ``history`` is what is replayed.
    """
    report = BacktestReport(since=since)
    spent: dict[tuple, Decimal] = {}
    for pushed_at, view in history:
        verdict = engine.evaluate(rules, view)
        outcome = verdict.outcome
        if (
            outcome == "auto_approve"
            and verdict.budget
            and not _fits(verdict, view, pushed_at, spent)
        ):
            outcome = "review"
            report.sent_to_review_by_budget += 1
        report.actions += 1
        report.outcomes[outcome] += 1
        report.by_rule[verdict.rule] += 1
        if outcome == "auto_approve":
            amount = engine.lookup(view, amount_path)
            if engine.is_number(amount):
                report.auto_approved_amount += Decimal(str(amount))
    return report


def _fits(verdict: engine.Verdict, view: dict, at: datetime, spent: dict) -> bool:
    budget = verdict.budget
    amount, scope = budget_amount(budget, view), budget_scope(budget, view)
    if amount is None or scope is None:
        return False
    key = (verdict.rule, scope, window_start(budget.per, at))
    if spent.get(key, Decimal(0)) + amount > Decimal(str(budget.max)):
        return False
    spent[key] = spent.get(key, Decimal(0)) + amount
    return True


def dry_run(rules: list[engine.Rule], view: dict) -> str:
    """The verdict and trace for one action, as text."""
    verdict = engine.evaluate(rules, view)
    lines = [
        f"verdict: {verdict.outcome}",
        f"rule: {verdict.rule or '(default: review by the default group)'}",
    ]
    if verdict.reason:
        lines.append(f"reason: {verdict.reason}")
    if verdict.outcome == "review":
        lines.append(
            f"group: {verdict.group or '(default group)'}; approvals required: {verdict.approvals_required}"
        )
    if verdict.edit_bounds:
        lines.append(f"edit bounds: {verdict.edit_bounds}")
    if verdict.budget:
        lines.append(f"budget: {verdict.budget.as_dict()} (not checked in a dry run)")
    lines.append("trace:")
    lines += [
        f"  {'✓' if step['matched'] else '✗'} {step['rule'] or '(default)'}: {step['why']}"
        for step in verdict.trace
    ]
    return "\n".join(lines)


SINCE_RE = re.compile(r"^(\d+)([dhm])$")


def parse_since(value: str) -> datetime | None:
    """``30d``, ``12h``, ``90m`` → that long ago; ``all`` → None (no limit)."""
    if value == "all":
        return None
    match = SINCE_RE.match(value.strip())
    if not match:
        raise ValueError("must look like 30d, 12h or 90m (or all)")
    number, unit = int(match.group(1)), match.group(2)
    return (
        timezone.now()
        - {
            "d": timedelta(days=number),
            "h": timedelta(hours=number),
            "m": timedelta(minutes=number),
        }[unit]
    )
