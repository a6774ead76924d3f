"""The rule engine: parse rule definitions, evaluate them against an action.

Pure: no database, no clock, no I/O, no ``eval``. A rule set is an ordered
list; the first rule whose ``kind``, ``agent`` and ``when`` all match decides.
Nothing matched → review by the default group. See docs/rules.md.

Conditions::

    {path: payload.amount_cents, lte: 5000}          # leaf: one path, one operator
    {all: [cond, ...]}  {any: [cond, ...]}  {not: cond}

Operators: eq ne lt lte gt gte in not_in contains exists. A leaf whose path is
missing is false (except ``exists: false``); comparing values of different
JSON types is false, never an error. The edit bounds a rule's ``edit_bounds``
feeds are computed and checked in ``rules.bounds``.
"""

from __future__ import annotations

import fnmatch
import math
import re
from dataclasses import dataclass, field
from typing import Any, TypeGuard, TypeVar

from .paths import index_of, path_problem

OPERATORS = ("eq", "ne", "lt", "lte", "gt", "gte", "in", "not_in", "contains", "exists")
OUTCOMES = ("auto_approve", "auto_reject", "review")
RULE_KEYS = {
    "name",
    "kind",
    "agent",
    "when",
    "then",
    "reason",
    "group",
    "approvals_required",
    "expires_in_s",
    "edit_bounds",
    "budget",
    "enabled",
    "description",
    "escalate_after_s",
    "escalate_to",
}
# What a rule's ``kind:`` may be: an accepted kind's characters (approvals.schemas.validation
# KIND_RE) and fnmatch's globs; anything else (uppercase, spaces, invisible characters)
# could never match and is refused at import rather than silently matching nothing.
KIND_GLOB = re.compile(r"[a-z0-9_.*?\[\]!-]{1,100}")
PATH_ROOTS = ("payload", "flags", "context", "kind", "agent")
MISSING = object()


class RuleError(ValueError):
    """A malformed rule: the message names the rule and the bad part."""

    def __init__(self, rule: str, where: str, problem: str):
        super().__init__(
            f"rule {rule!r}: {where}: {problem}" if where else f"rule {rule!r}: {problem}"
        )
        self.rule = rule
        self.where = where


# --- The parsed forms -----------------------------------------------------------------


@dataclass(frozen=True)
class Leaf:
    path: str
    op: str
    value: Any


@dataclass(frozen=True)
class Group:
    op: str  # all | any | not
    items: tuple[Leaf | Group, ...]


@dataclass(frozen=True)
class Budget:
    per: str  # day | hour
    sum: str  # a payload path, "count", or "amount" (the action's amount, rules.money)
    max: float
    scope: str | None = (
        None  # optional payload path: one budget per value (e.g. payload.customer_id)
    )

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"per": self.per, "sum": self.sum, "max": self.max}
        if self.scope:
            out["scope"] = self.scope
        return out


@dataclass(frozen=True)
class Rule:
    name: str
    then: str
    kind: str = "*"
    agent: str | None = None
    when: Leaf | Group | None = None
    reason: str = ""
    group: str | None = None
    approvals_required: int = 1
    expires_in_s: int | None = None
    edit_bounds: dict[str, Any] = field(default_factory=dict)
    budget: Budget | None = None
    escalate_after_s: int | None = None
    escalate_to: str | None = None
    enabled: bool = True
    source: dict[str, Any] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class Verdict:
    outcome: str
    rule: str | None  # None: nothing matched, the default applied
    reason: str = ""
    group: str | None = None
    approvals_required: int = 1
    expires_in_s: int | None = None
    edit_bounds: dict[str, Any] = field(default_factory=dict)
    budget: Budget | None = None
    escalate_after_s: int | None = None
    escalate_to: str | None = None
    trace: list[dict[str, Any]] = field(default_factory=list)


# --- Parsing (at save / import time) ----------------------------------------------------


def parse_rules(items: Any) -> list[Rule]:
    """Parse a list of rule dicts; raise RuleError naming the first bad rule and part."""
    if not isinstance(items, list):
        raise RuleError("(rule set)", "rules", "must be a list of rules")
    rules, seen = [], set()
    for index, item in enumerate(items):
        rule = parse_rule(item, index)
        if rule.name in seen:
            raise RuleError(rule.name, "name", "is used by more than one rule")
        seen.add(rule.name)
        rules.append(rule)
    return rules


def parse_rule(item: Any, index: int = 0) -> Rule:
    if not isinstance(item, dict):
        raise RuleError(f"#{index + 1}", "", "must be a mapping with name, kind, when, then")
    name = item.get("name")
    if not isinstance(name, str) or not name.strip() or len(name) > 200:
        raise RuleError(
            f"#{index + 1}", "name", "every rule needs a name (text, at most 200 characters)"
        )
    unknown = sorted(set(item) - RULE_KEYS)
    if unknown:
        raise RuleError(name, unknown[0], f"unknown key (allowed: {', '.join(sorted(RULE_KEYS))})")
    then = item.get("then")
    if then not in OUTCOMES:
        raise RuleError(name, "then", f"must be one of {', '.join(OUTCOMES)}, not {then!r}")
    kind = _text(name, item, "kind", "*")
    if not KIND_GLOB.fullmatch(kind):
        raise RuleError(
            name,
            "kind",
            f"{kind!r} could never match a kind: kinds are dotted lowercase words (a-z, 0-9, "
            "'_', '-'), optionally with the globs * ? [ ] (e.g. payment.*)",
        )
    agent = item.get("agent")
    if agent is not None and (not isinstance(agent, str) or not agent):
        raise RuleError(name, "agent", "must be an agent name (or a glob)")
    when = parse_condition(name, item["when"], "when") if item.get("when") is not None else None
    reason = _text(name, item, "reason", "")
    if then == "auto_reject" and not reason:
        raise RuleError(
            name, "reason", "auto_reject needs a reason: the agent receives it as the decision note"
        )
    group = item.get("group")
    if group is not None and (not isinstance(group, str) or not group.strip()):
        raise RuleError(name, "group", "must be the name of a reviewer group")
    required = _int(name, item, "approvals_required", 1, minimum=1, maximum=10)
    expires = _int(name, item, "expires_in_s", None, minimum=1, maximum=365 * 24 * 3600)
    bounds = _edit_bounds(name, item.get("edit_bounds"))
    budget = _budget(name, item.get("budget"))
    if budget and then != "auto_approve":
        raise RuleError(name, "budget", "only an auto_approve rule can have a budget")
    escalate_after, escalate_to = _escalation(name, item, then)
    enabled = item.get("enabled", True)
    if not isinstance(enabled, bool):
        raise RuleError(name, "enabled", "must be true or false")
    return Rule(
        name=name,
        then=then,
        kind=kind,
        agent=agent,
        when=when,
        reason=reason,
        group=group,
        approvals_required=required,
        expires_in_s=expires,
        edit_bounds=bounds,
        budget=budget,
        escalate_after_s=escalate_after,
        escalate_to=escalate_to,
        enabled=enabled,
        source=dict(item),
    )


def _escalation(name: str, item: dict[str, Any], then: str) -> tuple[int | None, str | None]:
    """A review rule's ``escalate_after_s`` and ``escalate_to``: both or neither."""
    escalate_after = _int(name, item, "escalate_after_s", None, minimum=1, maximum=365 * 24 * 3600)
    escalate_to = item.get("escalate_to")
    if (escalate_after is None) != (escalate_to is None):
        raise RuleError(
            name,
            "escalate_to" if escalate_to is None else "escalate_after_s",
            "escalate_after_s and escalate_to go together",
        )
    if escalate_to is not None and (
        then != "review" or not isinstance(escalate_to, str) or not escalate_to.strip()
    ):
        raise RuleError(
            name, "escalate_to", "a review rule may escalate to the name of another reviewer group"
        )
    return escalate_after, escalate_to


def parse_condition(rule: str, raw: Any, where: str) -> Leaf | Group:
    if not isinstance(raw, dict) or not raw:
        raise RuleError(
            rule,
            where,
            "a condition must be a mapping like {path: payload.amount_cents, lte: 5000}",
        )
    if "path" not in raw:
        return _parse_group(rule, raw, where)
    path = raw["path"]
    if (
        not isinstance(path, str)
        or path.split(".")[0] not in PATH_ROOTS
        or ".." in path
        or path.endswith(".")
    ):
        raise RuleError(
            rule,
            f"{where}.path",
            f"must start with one of {', '.join(PATH_ROOTS)}, e.g. payload.amount_cents",
        )
    if path_problem(path):
        raise RuleError(rule, f"{where}.path", path_problem(path) or "")
    ops = [key for key in raw if key != "path"]
    if len(ops) != 1:
        raise RuleError(
            rule,
            where,
            f"a condition on {path} needs exactly one operator of {', '.join(OPERATORS)}",
        )
    op = ops[0]
    if op not in OPERATORS:
        raise RuleError(
            rule, f"{where}.{op}", f"unknown operator (use one of {', '.join(OPERATORS)})"
        )
    value = raw[op]
    _check_operand(rule, f"{where}.{op}", op, value)
    return Leaf(path, op, value)


def _parse_group(rule: str, raw: dict[str, Any], where: str) -> Group:
    """``all`` or ``any`` of a list of conditions, or ``not`` one."""
    if len(raw) != 1:
        raise RuleError(
            rule, where, "use exactly one of all, any, not (or a path with one operator)"
        )
    ((op, value),) = raw.items()
    if op in ("all", "any"):
        if not isinstance(value, list) or not value:
            raise RuleError(rule, f"{where}.{op}", "must be a non-empty list of conditions")
        return Group(
            op,
            tuple(parse_condition(rule, c, f"{where}.{op}[{i}]") for i, c in enumerate(value)),
        )
    if op == "not":
        return Group("not", (parse_condition(rule, value, f"{where}.not"),))
    raise RuleError(
        rule,
        f"{where}.{op}",
        f"unknown operator (use all, any, not, or path with one of {', '.join(OPERATORS)})",
    )


def _check_operand(rule: str, where: str, op: str, value: Any) -> None:
    if op in ("in", "not_in") and not isinstance(value, list):
        raise RuleError(rule, where, "needs a list of values")
    if op in ("lt", "lte", "gt", "gte") and not (is_number(value) or isinstance(value, str)):
        raise RuleError(rule, where, "needs a number (or text)")
    if op == "exists" and not isinstance(value, bool):
        raise RuleError(rule, where, "needs true or false")


def _text(rule: str, item: dict[str, Any], key: str, default: str) -> str:
    value = item.get(key, default)
    if not isinstance(value, str):
        raise RuleError(rule, key, "must be text")
    return value


_Default = TypeVar("_Default", bound=int | None)


def _int(
    rule: str, item: dict[str, Any], key: str, default: _Default, *, minimum: int, maximum: int
) -> int | _Default:
    value = item.get(key, default)
    if value is default:
        return default
    if not isinstance(value, int) or isinstance(value, bool) or not minimum <= value <= maximum:
        raise RuleError(rule, key, f"must be a whole number from {minimum} to {maximum}")
    return value


def _edit_bounds(rule: str, raw: Any) -> dict[str, Any]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise RuleError(rule, "edit_bounds", "must map payload paths to {min, max}")
    bounds = {}
    for path, limits in raw.items():
        where = f"edit_bounds.{path}"
        if not isinstance(path, str) or not path.startswith("payload."):
            raise RuleError(rule, where, "paths must be under payload.")
        if path_problem(path):
            raise RuleError(rule, where, path_problem(path) or "")
        if not isinstance(limits, dict) or not limits or set(limits) - {"min", "max"}:
            raise RuleError(rule, where, "must be {min: …, max: …} (either may be omitted)")
        for key, value in limits.items():
            if not (is_number(value) or value == "original" or value is None):
                raise RuleError(
                    rule,
                    f"{where}.{key}",
                    "must be a number, the word original, or null (no limit)",
                )
        bounds[path] = dict(limits)
    return bounds


def _budget(rule: str, raw: Any) -> Budget | None:
    if raw is None:
        return None
    if not isinstance(raw, dict) or set(raw) - {"per", "sum", "max", "scope"}:
        raise RuleError(
            rule,
            "budget",
            "must be {per: day|hour, sum: <payload path>|amount|count, max: N, scope?: <payload path>}",
        )
    per, total, cap, scope = raw.get("per"), raw.get("sum"), raw.get("max"), raw.get("scope")
    if per not in ("day", "hour"):
        raise RuleError(rule, "budget.per", "must be day or hour")
    if not isinstance(total, str) or not (
        total in ("count", "amount") or total.startswith("payload.")
    ):
        raise RuleError(
            rule,
            "budget.sum",
            "must be count, amount (the action's declared amount) or a payload path such as "
            "payload.amount_cents",
        )
    if not is_number(cap) or cap < 0:
        raise RuleError(rule, "budget.max", "must be a number of at least 0")
    if scope is not None and (not isinstance(scope, str) or not scope.startswith("payload.")):
        raise RuleError(rule, "budget.scope", "must be a payload path such as payload.customer_id")
    return Budget(per=per, sum=total, max=cap, scope=scope)


def is_number(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


# --- Evaluation ------------------------------------------------------------------------------


def evaluate(rules: list[Rule], action: dict[str, Any]) -> Verdict:
    """Return the verdict of the first enabled rule that matches ``action``, with a trace.

    ``action`` is ``{"kind", "agent", "payload", "flags", "context"}``.
    """
    trace = []
    for rule in rules:
        if not rule.enabled:
            continue
        matched, why = _matches(rule, action)
        trace.append({"rule": rule.name, "matched": matched, "why": why})
        if matched:
            return Verdict(
                outcome=rule.then,
                rule=rule.name,
                reason=rule.reason,
                group=rule.group,
                approvals_required=rule.approvals_required,
                expires_in_s=rule.expires_in_s,
                edit_bounds=rule.edit_bounds,
                budget=rule.budget,
                escalate_after_s=rule.escalate_after_s,
                escalate_to=rule.escalate_to,
                trace=trace,
            )
    trace.append(
        {"rule": None, "matched": True, "why": "no rule matched: review by the default group"}
    )
    return Verdict(outcome="review", rule=None, trace=trace)


def _matches(rule: Rule, action: dict[str, Any]) -> tuple[bool, str]:
    kind = action.get("kind")
    if not isinstance(kind, str) or not fnmatch.fnmatchcase(kind, rule.kind):
        return False, f"kind {kind!r} does not match {rule.kind!r}"
    agent = action.get("agent")
    if rule.agent is not None and not (
        isinstance(agent, str) and fnmatch.fnmatchcase(agent, rule.agent)
    ):
        return False, f"agent {agent!r} does not match {rule.agent!r}"
    if rule.when is None:
        return True, f"kind matches {rule.kind!r}; no conditions"
    matched, why = check(rule.when, action)
    return matched, why


def check(condition: Leaf | Group, action: dict[str, Any]) -> tuple[bool, str]:
    """Evaluate one condition; returns (matched, a short human explanation)."""
    if isinstance(condition, Leaf):
        actual = lookup(action, condition.path)
        matched = _apply(condition.op, actual, condition.value)
        shown = "missing" if actual is MISSING else repr(actual)
        return (
            matched,
            f"{condition.path} {condition.op} {condition.value!r}: {shown} → {'yes' if matched else 'no'}",
        )
    if condition.op == "not":
        inner, why = check(condition.items[0], action)
        return not inner, f"not ({why})"
    results = [check(item, action) for item in condition.items]
    matched = all(r for r, _ in results) if condition.op == "all" else any(r for r, _ in results)
    return matched, f"{condition.op}[" + "; ".join(why for _, why in results) + "]"


def lookup(document: dict[str, Any], path: str) -> Any:
    node: Any = document
    for part in path.split("."):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and (index := index_of(part)) is not None and index < len(node):
            node = node[index]  # one spelling: "0", never "00", "０" or "+0" (rules.paths)
        else:
            return MISSING
    return node


def strict_equal(a: Any, b: Any) -> bool:
    """JSON equality: true is not 1, 1 equals 1.0, lists and objects compare deeply."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if is_number(a) and is_number(b):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(strict_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(strict_equal(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def _apply(op: str, actual: Any, expected: Any) -> bool:
    if op == "exists":
        return bool((actual is not MISSING) == expected)
    if actual is MISSING:
        return False
    if op == "eq":
        return strict_equal(actual, expected)
    if op == "ne":
        return not strict_equal(actual, expected)
    if op in ("lt", "lte", "gt", "gte"):
        return _compare(op, actual, expected)
    if op in ("in", "not_in"):
        found = any(strict_equal(actual, item) for item in expected)
        return found if op == "in" else not found
    if op == "contains":
        return _contains(actual, expected)
    return False


def _contains(actual: Any, expected: Any) -> bool:
    if isinstance(actual, list):
        return any(strict_equal(item, expected) for item in actual)
    if isinstance(actual, str) and isinstance(expected, str):
        return expected in actual
    return False


def _compare(op: str, actual: Any, expected: Any) -> bool:
    comparable = (is_number(actual) and is_number(expected)) or (
        isinstance(actual, str) and isinstance(expected, str)
    )
    if not comparable:
        return False
    if op == "lt":
        return bool(actual < expected)
    if op == "lte":
        return bool(actual <= expected)
    if op == "gt":
        return bool(actual > expected)
    return bool(actual >= expected)
