"""Dry runs: what a candidate rule set would do to one action, or to past actions.

The past actions are the caller's to give (``backtest(rules, history)``): rules
never import the approvals app, which depends on them. The rules' adapters (the admin's
backtest page, ``impri rules``) stand above the core and read them from
``approvals.backtest_history.past_action_views``.
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

from . import engine
from .kinds import KindSpec, declaration, hold_at_step_up, hold_undeclared, payload_problems
from .money import Money, MoneySpec, amounts
from .services import budget_amount, budget_scope, window_start

# One past action as the rules saw it when it was pushed: when, and the view
# ``engine.evaluate`` takes (kind, agent, agent_id, payload, flags, context).
PastAction = tuple[datetime, dict]
# The report's amounts: the actions' own (rules.money), unless the caller names a path.
AMOUNT_PATH = None
MAX_NAMED = 20  # actions over a budget named in the report; the rest are counted


@dataclass
class BacktestReport:
    since: datetime | None
    actions: int = 0
    outcomes: Counter = field(default_factory=Counter)
    # Minor units per currency ("" when unknown); with an amount path, plain numbers under "".
    auto_approved: Counter = field(default_factory=Counter)
    unreadable: int = 0  # auto-approved actions whose amount could not be read
    sent_to_review_by_budget: int = 0
    over_budget: list[str] = field(default_factory=list)
    by_rule: Counter = field(default_factory=Counter)

    @property
    def auto_approved_amount(self) -> Decimal:
        return Decimal(sum(self.auto_approved.values()))

    def as_text(self, amount_path: str | None = None) -> str:
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
            f"  total auto-approved{f' ({amount_path})' if amount_path else ''}: "
            + self._totals(amount_path),
        ]
        if self.over_budget:
            named = ", ".join(self.over_budget[:MAX_NAMED])
            more = len(self.over_budget) - MAX_NAMED
            lines.append(f"  over a budget: {named}" + (f" and {more} more" if more > 0 else ""))
        lines.append("By rule:")
        lines += [
            f"  {name or '(default)'}: {count}"
            for name, count in sorted(self.by_rule.items(), key=_key)
        ]
        return "\n".join(lines)

    def _totals(self, amount_path: str | None) -> str:
        if amount_path:
            return _plain(self.auto_approved_amount)
        parts = [
            str(Money(total, currency)) if currency else f"{total} (minor units, no currency)"
            for currency, total in sorted(self.auto_approved.items())
            if total
        ]
        if self.unreadable:
            parts.append(f"{self.unreadable} amount(s) Impri could not read")
        return ", ".join(parts) or "0"


def _key(item):
    return (item[0] is None, item[0] or "")


def _plain(value: Decimal) -> str:
    return format(value.normalize(), "f") if value else "0"


def backtest(
    rules: list[engine.Rule],
    history: Iterable[PastAction],
    since: datetime | None = None,
    amount_path: str | None = AMOUNT_PATH,
    kinds: dict[str, KindSpec] | None = None,
) -> BacktestReport:
    """Replay ``history`` (oldest first) through ``rules``; budgets are simulated in memory.

    ``kinds`` is the candidate file's ``kinds:``: a past action of a kind it
    declares is read with that declaration, others with the one fixed at their
    push. ``since`` only labels the report: ``history`` is what is replayed.
    """
    report = BacktestReport(since=since)
    spent: dict[tuple, Decimal] = {}
    for pushed_at, view in history:
        view = _declared(view, kinds)
        verdict = _evaluate(rules, view)
        outcome = verdict.outcome
        if (
            outcome == "auto_approve"
            and verdict.budget
            and not _fits(verdict, view, pushed_at, spent)
        ):
            outcome = "review"
            report.sent_to_review_by_budget += 1
            report.over_budget.append(str(view.get("id") or f"#{report.actions + 1}"))
        report.actions += 1
        report.outcomes[outcome] += 1
        report.by_rule[verdict.rule] += 1
        if outcome == "auto_approve":
            _add_amount(report, view, amount_path)
    return report


def _evaluate(rules: list[engine.Rule], view: dict) -> engine.Verdict:
    """The verdict a push would get: an undeclared kind's auto-approval goes to review (strict),
    and so does one of money at or above the step-up threshold."""
    verdict = engine.evaluate(rules, view)
    if view.get("money") is None and settings.IMPRI_UNDECLARED_KINDS != "detect":
        return hold_undeclared(verdict, str(view.get("kind")))
    return hold_at_step_up(verdict, view, settings.IMPRI_STEP_UP_CENTS)


def _declared(view: dict, kinds: dict[str, KindSpec] | None) -> dict:
    spec = declaration(kinds, view.get("kind")) if kinds is not None else None
    if spec is None or spec.money is None:
        return view
    return {**view, "money": [m.as_dict() for m in spec.money]}


def _add_amount(report: BacktestReport, view: dict, amount_path: str | None) -> None:
    if amount_path:
        amount = engine.lookup(view, amount_path)
        if engine.is_number(amount):
            report.auto_approved[""] += Decimal(str(amount))
        return
    declared = view.get("money")
    specs = [MoneySpec.from_dict(m) for m in declared] if declared is not None else None
    for found in amounts({"payload": view.get("payload")}, specs):
        if found.minor is None:
            report.unreadable += 1
        else:
            report.auto_approved[found.currency] += found.minor


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


def dry_run(rules: list[engine.Rule], view: dict, kinds: dict[str, KindSpec] | None = None) -> str:
    """The verdict and trace for one action, as text, with its amounts as the guards read them."""
    spec = declaration(kinds or {}, view.get("kind"))
    problems = payload_problems(spec, view.get("payload")) if spec is not None else []
    view = _declared(view, kinds or {})
    verdict = _evaluate(rules, view)
    lines = [f"refused at push: {path}: {message}" for path, message in problems]
    lines += [
        f"verdict: {verdict.outcome}",
        f"rule: {verdict.rule or '(default: review by the default group)'}",
    ]
    if verdict.reason:
        lines.append(f"reason: {verdict.reason}")
    if verdict.outcome == "review":
        lines.append(
            f"group: {verdict.group or '(default group)'}; approvals required: {verdict.approvals_required}"
        )
    lines.append("amounts: " + _amounts_text(view, spec))
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


def _amounts_text(view: dict, spec: KindSpec | None) -> str:
    declared = view.get("money")
    specs = [MoneySpec.from_dict(m) for m in declared] if declared is not None else None
    found = amounts({"payload": view.get("payload")}, specs)
    source = (
        f"declared by {spec.name}"
        if specs is not None and spec
        else "found by the detector; the kind is not declared"
    )
    if not found:
        return f"none ({source})"
    shown = [
        f"{a.path} = {a.money}"
        if a.minor is not None
        else f"{a.path} {a.problem} (over every limit)"
        for a in found
    ]
    return "; ".join(shown) + f" ({source})"


def undeclared_kinds(
    history: Iterable[PastAction], kinds: dict[str, KindSpec]
) -> list[tuple[str, int, datetime]]:
    """The kinds in ``history`` that no declaration covers: ``(kind, actions, last pushed)``.

    Covered: declared by ``kinds`` (the rules in force, with the defaults) or by the action
    itself at push (a gateway tool's ``money:``). What an operator must declare before
    ``IMPRI_UNDECLARED_KINDS=strict`` holds them all for review (docs/rules.md).
    """
    seen: dict[str, tuple[int, datetime]] = {}
    for pushed_at, view in history:
        kind = str(view.get("kind"))
        spec = declaration(kinds, kind)
        if view.get("money") is not None or (spec is not None and spec.money is not None):
            continue
        count, _ = seen.get(kind, (0, pushed_at))
        seen[kind] = (count + 1, pushed_at)
    return [(kind, count, last) for kind, (count, last) in sorted(seen.items())]


SINCE_RE = re.compile(r"([0-9]+)([dhm])")


def parse_since(value: str) -> datetime | None:
    """``30d``, ``12h``, ``90m`` → that long ago; ``all`` → None (no limit)."""
    if value == "all":
        return None
    match = SINCE_RE.fullmatch(value.strip())
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
