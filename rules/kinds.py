"""Kinds: what an action of a kind must look like, and where its money is.

The rules file's top-level ``kinds:`` section, parsed and checked here (pure,
like the engine)::

    kinds:
      psp.refund:
        schema: {type: object, required: [charge, amount, currency]}   # JSON Schema for payload
        money:
          - amount: payload.amount        # a dotted path into the action
            currency: payload.currency    # a path, or a fixed ISO 4217 code such as "USD"
            minor_units: true             # the amount is in minor units (default true)
            sign: positive                # positive (default) | any

``payment.refund`` and ``payment.charge`` are declared by default
(``payload.amount_cents`` in minor units of ``payload.currency``, positive); a
rules file may redeclare them. See docs/rules.md.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import jsonschema

from .engine import Group, Leaf, Rule, RuleError, Verdict
from .money import MoneySpec, amounts, at_or_above, money_problems, money_spec_problem

KIND_KEYS = {"schema", "money"}
# An accepted kind as a push spells it (approvals.schemas.validation.KIND_RE): a
# ``kinds:`` entry spelled otherwise (uppercase, spaces, invisible characters)
# could never be pushed, so it is refused rather than imported to match nothing.
KIND_NAME = re.compile(r"(?=.{1,100}$)[a-z0-9_-]+(\.[a-z0-9_-]+)*")


class KindError(RuleError):
    """A malformed ``kinds:`` entry: the message names the kind and the bad part."""

    def __init__(self, kind: str, where: str, problem: str):
        ValueError.__init__(
            self, f"kinds: {kind}" + (f".{where}" if where else "") + f": {problem}"
        )
        self.rule = "kinds"
        self.where = f"{kind}.{where}" if where else kind


@dataclass(frozen=True)
class KindSpec:
    """A kind's declaration. ``money`` None: declares none (the detector reads the payload);
    ``()``: declares that the kind moves no money."""

    name: str
    money: tuple[MoneySpec, ...] | None = None
    schema: dict | None = None

    def as_dict(self) -> dict:
        out: dict[str, Any] = {}
        if self.schema is not None:
            out["schema"] = self.schema
        if self.money is not None:
            out["money"] = [spec.as_dict() for spec in self.money]
        return out


_DEFAULT_MONEY = (MoneySpec("payload.amount_cents", "payload.currency"),)
DEFAULT_KINDS = {
    name: KindSpec(name, _DEFAULT_MONEY) for name in ("payment.refund", "payment.charge")
}


def parse_kinds(raw: Any) -> dict[str, KindSpec]:
    """The ``kinds:`` section as given (without the defaults); KindError names the bad part."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise KindError("(section)", "", "must map kind names to {schema, money}")
    return {name: parse_kind(name, spec) for name, spec in raw.items()}


def parse_kind(name: Any, raw: Any) -> KindSpec:
    if not isinstance(name, str) or not KIND_NAME.fullmatch(name):
        raise KindError(
            ascii(name) if isinstance(name, str) else str(name),
            "",
            "could never match a kind: a kind is dotted lowercase words of a-z, 0-9, '_' and "
            "'-', exactly as agents push it (e.g. psp.refund)",
        )
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise KindError(name, "", "must be a mapping with schema and/or money")
    unknown = sorted(set(raw) - KIND_KEYS)
    if unknown:
        raise KindError(name, unknown[0], "unknown key (allowed: schema, money)")
    schema = raw.get("schema")
    if schema is not None:
        _check_schema(name, schema)
    return KindSpec(name, parse_money(raw.get("money"), name), schema)


def parse_money(raw: Any, kind: str, root: str = "payload") -> tuple[MoneySpec, ...] | None:
    """A ``money:`` list (a kind's, or a gateway tool's with ``root`` its arguments)."""
    if raw is None:
        return None
    if not isinstance(raw, list):
        raise KindError(kind, "money", "must be a list of {amount, currency}")
    specs = []
    for index, item in enumerate(raw):
        problem = money_spec_problem(item, root)
        if problem:
            where, message = problem
            raise KindError(kind, f"money[{index}]" + (f".{where}" if where else ""), message)
        specs.append(MoneySpec.from_dict(item))
    return tuple(specs)


def _check_schema(kind: str, schema: Any) -> None:
    if not isinstance(schema, dict):
        raise KindError(kind, "schema", "must be a JSON Schema object, e.g. {type: object}")
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as exc:
        where = ".".join(str(p) for p in exc.path)
        raise KindError(kind, "schema" + (f".{where}" if where else ""), exc.message) from None


def declaration(kinds: dict[str, KindSpec], kind: str) -> KindSpec | None:
    """What ``kind`` declares: the rules file's entry, else the default, else None."""
    return kinds.get(kind) or DEFAULT_KINDS.get(kind)


def all_declared(kinds: dict[str, KindSpec]) -> dict[str, KindSpec]:
    return {**DEFAULT_KINDS, **kinds}


def payload_problems(spec: KindSpec, payload: Any) -> list[tuple[str, str]]:
    """Where ``payload`` breaks the kind's schema and its money: ``[(path, problem)]``."""
    out = []
    if spec.schema is not None:
        validator = jsonschema.validators.validator_for(spec.schema)(spec.schema)
        for error in sorted(validator.iter_errors(payload), key=lambda e: list(e.absolute_path)):
            out.append((_error_path(error), error.message))
    if isinstance(payload, dict) and spec.money:
        out += money_problems({"payload": payload}, list(spec.money))
    return out


def _error_path(error: jsonschema.ValidationError) -> str:
    path = ".".join(["payload", *(str(p) for p in error.absolute_path)])
    if error.validator == "required" and isinstance(error.instance, dict):
        missing = [name for name in error.validator_value if name not in error.instance]
        if missing:
            return f"{path}.{missing[0]}"
    return path


def hold_undeclared(verdict: Verdict, kind: str) -> Verdict:
    """An auto-approval of a kind that declares no money goes to review (the closed world).

    Impri can't know what such an action moves, so no rule may approve it unseen;
    ``approvals.services.pushing`` and the backtest call this when
    ``IMPRI_UNDECLARED_KINDS=strict``.
    """
    if verdict.outcome != "auto_approve":
        return verdict
    why = (
        f"kind not declared: {kind!r} declares no money (kinds: in the rules file; money: [] "
        "if it moves none), so what it moves is unknown: review"
    )
    return _to_review(verdict, why)


def _to_review(verdict: Verdict, why: str) -> Verdict:
    return replace(
        verdict,
        outcome="review",
        budget=None,
        trace=[*verdict.trace, {"rule": verdict.rule, "matched": True, "why": why}],
    )


def hold_at_step_up(verdict: Verdict, view: dict[str, Any], limit: int | None) -> Verdict:
    """An auto-approval of money at or above ``limit`` (``IMPRI_STEP_UP_CENTS``) goes to review.

    What no reviewer could approve without a second factor, no rule approves unseen: the
    action's total per currency, as a magnitude (−1,000,000 of a ``sign: any`` kind is
    1,000,000), or an amount that can't be read. ``view`` is the engine's view of the
    action, with ``money`` its declaration (None: what the detector finds).
    """
    if verdict.outcome != "auto_approve" or limit is None:
        return verdict
    declared = view.get("money")
    specs = [MoneySpec.from_dict(m) for m in declared] if declared is not None else None
    top = at_or_above(amounts({"payload": view.get("payload")}, specs), limit)
    if top is None:
        return verdict
    moved = (
        f"{abs(top.minor)} minor units {top.currency}".rstrip()
        if top.minor is not None
        else "an amount that can't be read"
    )
    why = (
        f"{top.path}: {moved} reach the step-up threshold (IMPRI_STEP_UP_CENTS={limit}), "
        "which no rule approves unseen: review"
    )
    return _to_review(verdict, why)


def check_signed_bounds(rules: list[Rule], kinds: dict[str, KindSpec]) -> None:
    """Refuse a rule that caps an amount a kind declares ``sign: any`` from above only.

    ``{path: payload.amount_cents, lte: 5000}`` is true of −1,000,000: on an amount that may
    be negative, ``lt``/``lte`` (or ``not`` of ``gt``/``gte``) says nothing about its size.
    The rule engine has no ``abs``; the RuleError says what to write instead.
    """
    for rule in rules:
        if rule.when is None:
            continue
        signed = {
            spec.amount: name
            for name, kind in all_declared(kinds).items()
            if kind.money and fnmatch.fnmatchcase(name, rule.kind)
            for spec in kind.money
            if spec.sign == "any"
        }
        if not signed:
            continue
        for where, leaf in _upper_bounds(rule.when, "when", negated=False):
            for amount, kind in signed.items():
                if _same_path(leaf.path, amount):
                    raise RuleError(
                        rule.name,
                        f"{where}.path",
                        f"{leaf.path} {leaf.op} caps {kind}'s amount from above only, and "
                        f"{kind} declares it sign: any, so -1000000 passes too: bound it on "
                        "both sides ({all: [{path: …, gte: -5000}, {path: …, lte: 5000}]}) or "
                        "declare sign: positive",
                    )


def _upper_bounds(
    condition: Leaf | Group, where: str, *, negated: bool
) -> Iterator[tuple[str, Leaf]]:
    """The leaves of ``condition`` that bound a number from above (``lt``, ``lte``; under a
    ``not``, ``gt`` and ``gte``) and are not bounded from below beside them in an ``all``."""
    if isinstance(condition, Leaf):
        if condition.op in (("gt", "gte") if negated else ("lt", "lte")):
            yield where, condition
        return
    if condition.op == "not":
        yield from _upper_bounds(condition.items[0], f"{where}.not", negated=not negated)
        return
    lower = set()
    if (condition.op == "all") != negated:  # both sides of one path, in one all: bounded
        below = ("lt", "lte") if negated else ("gt", "gte")
        lower = {
            item.path for item in condition.items if isinstance(item, Leaf) and item.op in below
        }
    for index, item in enumerate(condition.items):
        for found in _upper_bounds(item, f"{where}.{condition.op}[{index}]", negated=negated):
            if found[1].path not in lower:
                yield found


def _same_path(path: str, declared: str) -> bool:
    """``payload.lines.0.amount_cents`` is one of ``payload.lines.*.amount_cents``."""
    parts, pattern = path.split("."), declared.split(".")
    return len(parts) == len(pattern) and all(
        want in (got, "*") for got, want in zip(parts, pattern, strict=True)
    )
