"""Changing the rule set, and the budget counters the rules keep. Every change is audited."""

from __future__ import annotations

import difflib
import hashlib
import json
import secrets
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal, InvalidOperation

import yaml
from django.contrib.auth.models import Group
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from audit import log as audit
from audit.identity import current_actor
from audit.models import ActorType
from plumbing import strict_json, yaml_errors

from . import engine, money
from . import kinds as kinds_
from .models import BudgetCounter, Rule, RuleSet, RuleSetVersion
from .money import MoneySpec


@dataclass(frozen=True)
class LoadedRules:
    version: int
    rules: list[engine.Rule]
    kinds: dict[str, kinds_.KindSpec] = field(default_factory=dict)

    def declaration(self, kind: str) -> kinds_.KindSpec | None:
        return kinds_.declaration(self.kinds, kind)


@dataclass(frozen=True)
class RuleFile:
    """A rules file: its ordered rules and its ``kinds:`` section (without the defaults)."""

    rules: list[engine.Rule]
    kinds: dict[str, kinds_.KindSpec] = field(default_factory=dict)


_loaded: tuple[str, LoadedRules] | None = None


def current_rules(known: tuple[int, str] | None = None) -> LoadedRules:
    """The rules in force: one query for the version, the rules parsed once per revision.

    Every change bumps the version and draws a new revision in the same
    transaction (``bump_version``), so a process that reads revision R has R's
    rules and reloads only when it changes. ``known``: the ``(version, revision)``
    the caller has just read itself (a push's first read, ``approvals.services.pushing``),
    so it is not read again.
    """
    global _loaded
    version, revision = known if known is not None else read_revision()
    cached = _loaded
    if revision and cached is not None and cached[0] == revision:
        return cached[1]
    declared = RuleSet.objects.filter(pk=1).values_list("kinds", flat=True).first() or {}
    loaded = LoadedRules(
        version, [rule.parsed() for rule in Rule.objects.in_order()], kinds_.parse_kinds(declared)
    )
    _loaded = (revision, loaded) if revision else None
    return loaded


def cached_group_names() -> set[str]:
    """The groups the rules this process holds route to (empty before any are loaded).

    A push reads these groups in the statement that reads the revision
    (``approvals.services.pushing``); if the revision moved, it reads the group again.
    """
    cached = _loaded
    if cached is None:
        return set()
    return {rule.group for rule in cached[1].rules if rule.group}


def read_revision() -> tuple[int, str]:
    """The rule set's version and revision, ``(0, "")`` before the first change."""
    rows = RuleSet.objects.filter(pk=1).values_list("version", "revision")[:1]  # no ORDER BY
    return next(iter(rows), (0, ""))


# --- YAML ---------------------------------------------------------------------------


def parse_file(text: str) -> RuleFile:
    """Parse a rules file (``{rules: [...], kinds: {...}}``, or a bare list of rules).

    RuleError (KindError for ``kinds:``) names the bad part.
    """
    try:
        document = strict_json.load_yaml(text)
    except yaml.YAMLError as exc:
        error = engine.RuleError("(file)", "yaml", "")
        error.args = (yaml_errors.describe(exc, text),)
        raise error from None
    declared = {}
    if isinstance(document, dict) and set(document) <= {"rules", "kinds"}:
        declared = kinds_.parse_kinds(document.get("kinds"))
        document = document.get("rules")
    if document is None:
        document = []
    rules = engine.parse_rules(document)
    kinds_.check_signed_bounds(rules, declared)
    return RuleFile(rules, declared)


def parse_yaml(text: str) -> list[engine.Rule]:
    """The rules of a rules file (see ``parse_file``)."""
    return parse_file(text).rules


def export_yaml() -> str:
    specs = [rule.as_spec() for rule in Rule.objects.in_order()]
    document: dict = {"rules": specs}
    declared = RuleSet.objects.filter(pk=1).values_list("kinds", flat=True).first()
    if declared:
        document["kinds"] = declared
    return yaml.safe_dump(document, sort_keys=False, allow_unicode=True)


# --- Changes --------------------------------------------------------------------------


def group_names(rules: list[engine.Rule]) -> dict[str, str]:
    """Every reviewer group the rules name (``group``, ``escalate_to``) → the first rule naming it."""
    named: dict[str, str] = {}
    for rule in rules:
        for name in (rule.group, rule.escalate_to):
            if name:
                named.setdefault(name, rule.name)
    return named


def check_groups(rules: list[engine.Rule], *, create: bool = False) -> list[str]:
    """Refuse rules that route to a group that does not exist (a typo strands actions).

    With ``create`` the missing groups are made on purpose instead; returns
    their names.
    """
    named = group_names(rules)
    existing = set(Group.objects.filter(name__in=named).values_list("name", flat=True))
    missing = [name for name in named if name not in existing]
    if missing and not create:
        name = missing[0]
        rule = next(r for r in rules if name in (r.group, r.escalate_to))
        raise engine.RuleError(
            named[name],
            "group" if rule.group == name else "escalate_to",
            f"no reviewer group is named {name!r} (create it first, or import with "
            "--create-groups)",
        )
    for name in missing:
        Group.objects.get_or_create(name=name)
    return missing


def replace_rules(
    rules: list[engine.Rule] | RuleFile,
    *,
    by: str,
    create_groups: bool = False,
    allow_empty: bool = True,
) -> int:
    """Replace the whole rule set atomically (and its ``kinds:``, given a RuleFile); the new version.

    A rule naming a reviewer group that does not exist is a RuleError, unless
    ``create_groups`` creates it. A plain list of rules keeps the kinds as they are.
    Without ``allow_empty`` a set of no rules is a RuleError (see ``refuse_empty``).
    """
    declared = rules.kinds if isinstance(rules, RuleFile) else None
    rules = rules.rules if isinstance(rules, RuleFile) else rules
    with transaction.atomic():
        if not allow_empty:
            refuse_empty(rules, declared)
        if declared is not None:
            RuleSet.objects.get_or_create(pk=1)
            RuleSet.objects.filter(pk=1).update(
                kinds={name: spec.as_dict() for name, spec in declared.items()}
            )
        created = check_groups(rules, create=create_groups)
        Rule.objects.all().delete()
        for position, rule in enumerate(rules):
            spec = {k: v for k, v in rule.source.items() if k not in ("name", "enabled")}
            Rule.objects.create(
                position=position * 10, name=rule.name, enabled=rule.enabled, definition=spec
            )
        detail: dict = {"rules": [r.name for r in rules]}
        if declared:
            detail["kinds"] = sorted(declared)
        if created:
            detail["created_groups"] = created
        return bump_version(by=by, change="replaced", detail=detail)


def refuse_empty(rules: list[engine.Rule], declared: dict | None) -> None:
    """An import of no rules is a mistake until said otherwise (``--allow-empty``).

    An empty file (no rules, no kinds) is always refused; a file of ``kinds:`` alone
    only while rules are in force, which it would remove.
    """
    if rules:
        return
    in_force = Rule.objects.count()
    if declared and not in_force:
        return
    removes = f": importing it would remove the {in_force} rule(s) in force" if in_force else ""
    error = engine.RuleError("(file)", "rules", "")
    error.args = (f"no rules in it{removes} (pass --allow-empty to mean it)",)
    raise error


def bump_version(*, by: str, change: str, detail: dict | None = None) -> int:
    """Record a rule-set change: a new version, its content and diff, and an audit event.

    Runs in the caller's transaction, after the rules were changed.
    """
    RuleSet.objects.get_or_create(pk=1)
    RuleSet.objects.filter(pk=1).update(version=F("version") + 1, revision=secrets.token_hex(16))
    version = RuleSet.objects.get(pk=1).version
    stored = _store_version(version, by=by, change=change)
    audit.record(
        "rules.changed",
        actor_type=ActorType.REVIEWER if not by.startswith(("cli", "system")) else ActorType.SYSTEM,
        actor_id=by,
        actor_ref=current_actor()["actor_ref"],
        data={
            "change": change,
            "version": version,
            "rules_sha256": hashlib.sha256(stored.yaml.encode()).hexdigest(),
            **(detail or {}),
        },
    )
    return version


def _store_version(version: int, *, by: str, change: str) -> RuleSetVersion:
    text = export_yaml()
    previous = RuleSetVersion.objects.filter(version__lt=version).order_by("-version").first()
    before = previous.yaml if previous else ""
    diff = "".join(
        difflib.unified_diff(
            before.splitlines(keepends=True),
            text.splitlines(keepends=True),
            fromfile=f"v{previous.version}" if previous else "(none kept)",
            tofile=f"v{version}",
        )
    )
    return RuleSetVersion.objects.create(
        version=version,
        yaml=text,
        diff=diff,
        changed_by=by,
        change=change,
        created_at=timezone.now(),
    )


def rules_at(version: int) -> RuleSetVersion | None:
    """The rule set as it stood at ``version`` (None when it was not kept: before versions were stored)."""
    return RuleSetVersion.objects.filter(version=version).first()


# --- Budgets --------------------------------------------------------------------------


def window_start(per: str, now: datetime) -> datetime:
    if per == "hour":
        return now.replace(minute=0, second=0, microsecond=0)
    return now.replace(hour=0, minute=0, second=0, microsecond=0)


def budget_amount(budget: engine.Budget, action: dict) -> Decimal | None:
    """What this action costs against the budget; None when it can't be counted (→ review)."""
    if budget.sum == "count":
        return Decimal(1)
    if budget.sum == "amount":
        return _declared_amount(action)
    value = engine.lookup(action, budget.sum)
    if not engine.is_number(value) or value < 0:
        return None
    try:
        return Decimal(str(value))
    except InvalidOperation:
        return None


def _declared_amount(action: dict) -> Decimal | None:
    """What the action moves, as every money guard reads it (``money``: the declaration in the
    view): the sum of all its amounts (ten lines of 99,999 cost 999,990). None (→ review) when
    one can't be read or is negative, or when they are in more than one currency: a budget is
    one number, and Impri converts no currency."""
    declared = action.get("money")
    specs = [MoneySpec.from_dict(m) for m in declared] if declared is not None else None
    found = money.amounts({"payload": action.get("payload")}, specs)
    if any(a.minor is None or a.minor < 0 for a in found):
        return None
    if len({a.currency for a in found}) > 1:
        return None
    total = sum(a.minor or 0 for a in found)
    return Decimal(total) if total <= money.MAX_EXACT_INTEGER else None


def budget_scope(budget: engine.Budget, action: dict) -> str | None:
    # Keyed by the agent's id, not its name: a rename must not reset its budget.
    scope = f"agent#{action['agent_id']}"
    if budget.scope:
        value = engine.lookup(action, budget.scope)
        if value is engine.MISSING or isinstance(value, dict | list):
            return None
        scope += "|" + budget.scope + "=" + json.dumps(value)
    return scope


def reserve_budget(rule_name: str, budget: engine.Budget, action: dict, now: datetime) -> bool:
    """Atomically add this action to its budget window; False when it would pass the cap.

    Must run in the push's transaction. The reservation is one conditional
    UPDATE (``total + amount <= max``): concurrent pushes serialize on the
    counter row, and PostgreSQL re-checks the condition after each wait, so
    the cap holds without a read-then-write race.
    """
    amount = budget_amount(budget, action)
    scope = budget_scope(budget, action)
    if amount is None or scope is None:
        return False
    start = window_start(budget.per, now)
    cap = Decimal(str(budget.max))

    def reserve() -> bool:
        return _add_within(rule_name, scope, start, amount, cap - amount)

    # The window's counter usually exists: one statement. Nothing reserved means either
    # the cap or no counter yet; only then is it looked for (its queryset built only then:
    # building one costs about the UPDATE's own CPU), created, and tried once more.
    if reserve():
        return True
    if BudgetCounter.objects.filter(rule=rule_name, scope=scope, window_start=start).exists():
        return False
    try:
        with transaction.atomic():
            BudgetCounter.objects.create(rule=rule_name, scope=scope, window_start=start)
    except IntegrityError:
        pass  # another push created it first
    return reserve()


def _add_within(rule_name: str, scope: str, start: datetime, amount, at_most) -> bool:
    """``total += amount`` on the window's counter if ``total <= at_most``; whether it was.

    One conditional UPDATE: concurrent pushes on the same counter serialise on its row,
    and the one that would pass the cap changes nothing.
    """
    return bool(
        BudgetCounter.objects.filter(
            rule=rule_name, scope=scope, window_start=start, total__lte=at_most
        ).update(total=F("total") + amount)
    )
