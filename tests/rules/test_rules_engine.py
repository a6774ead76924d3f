"""The pure rule engine: operators, combinators, order, globs, the default, malformed rules."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rules import engine
from rules.bounds import bound_problem, effective_bounds

ACTION = {
    "kind": "payment.refund",
    "agent": "support-bot",
    "payload": {
        "amount_cents": 3000,
        "currency": "USD",
        "customer": {"tier": "gold"},
        "tags": ["mug", "damaged"],
        "note": "box crushed",
        "gift": False,
        "rate": 1.5,
    },
    "flags": ["policy_exception"],
    "context": {"channel": "email"},
}


def rule(when=None, **kw) -> engine.Rule:
    spec = {"name": kw.pop("name", "r"), "then": kw.pop("then", "auto_approve"), **kw}
    if when is not None:
        spec["when"] = when
    return engine.parse_rule(spec)


def matches(when) -> bool:
    return engine.evaluate([rule(when)], ACTION).rule == "r"


@pytest.mark.parametrize(
    ("when", "expected"),
    [
        ({"path": "payload.currency", "eq": "USD"}, True),
        ({"path": "payload.currency", "eq": "EUR"}, False),
        ({"path": "payload.amount_cents", "eq": 3000.0}, True),
        ({"path": "payload.gift", "eq": 0}, False),  # false is not 0
        ({"path": "payload.gift", "eq": False}, True),
        ({"path": "payload.currency", "ne": "EUR"}, True),
        ({"path": "payload.currency", "ne": "USD"}, False),
        ({"path": "payload.amount_cents", "lt": 3001}, True),
        ({"path": "payload.amount_cents", "lt": 3000}, False),
        ({"path": "payload.amount_cents", "lte": 3000}, True),
        ({"path": "payload.amount_cents", "lte": 2999}, False),
        ({"path": "payload.amount_cents", "gt": 2999}, True),
        ({"path": "payload.amount_cents", "gt": 3000}, False),
        ({"path": "payload.amount_cents", "gte": 3000}, True),
        ({"path": "payload.amount_cents", "gte": 3001}, False),
        ({"path": "payload.rate", "gt": 1}, True),
        ({"path": "payload.currency", "gt": 5}, False),  # text vs number: no match, no error
        ({"path": "payload.currency", "lt": "ZZZ"}, True),
        ({"path": "payload.currency", "in": ["USD", "EUR"]}, True),
        ({"path": "payload.currency", "in": ["GBP"]}, False),
        ({"path": "payload.currency", "not_in": ["GBP"]}, True),
        ({"path": "payload.currency", "not_in": ["USD"]}, False),
        ({"path": "flags", "contains": "policy_exception"}, True),
        ({"path": "flags", "contains": "vip"}, False),
        ({"path": "payload.note", "contains": "crushed"}, True),
        ({"path": "payload.tags.1", "eq": "damaged"}, True),
        ({"path": "payload.customer.tier", "eq": "gold"}, True),
        ({"path": "context.channel", "eq": "email"}, True),
        ({"path": "payload.customer.tier", "exists": True}, True),
        ({"path": "payload.refund_id", "exists": True}, False),
        ({"path": "payload.refund_id", "exists": False}, True),
        ({"path": "payload.refund_id", "eq": None}, False),  # missing is not null
        ({"path": "payload.refund_id", "ne": 1}, False),  # a missing path matches nothing
        ({"path": "kind", "eq": "payment.refund"}, True),
        ({"path": "agent", "eq": "support-bot"}, True),
    ],
)
def test_operators(when, expected):
    assert matches(when) is expected


@pytest.mark.parametrize(
    ("when", "expected"),
    [
        (
            {
                "all": [
                    {"path": "payload.currency", "eq": "USD"},
                    {"path": "payload.amount_cents", "lt": 5000},
                ]
            },
            True,
        ),
        (
            {
                "all": [
                    {"path": "payload.currency", "eq": "USD"},
                    {"path": "payload.amount_cents", "gt": 5000},
                ]
            },
            False,
        ),
        (
            {
                "any": [
                    {"path": "payload.currency", "eq": "EUR"},
                    {"path": "payload.amount_cents", "lt": 5000},
                ]
            },
            True,
        ),
        (
            {
                "any": [
                    {"path": "payload.currency", "eq": "EUR"},
                    {"path": "payload.amount_cents", "gt": 5000},
                ]
            },
            False,
        ),
        ({"not": {"path": "flags", "contains": "policy_exception"}}, False),
        ({"not": {"path": "flags", "contains": "vip"}}, True),
        ({"not": {"not": {"path": "flags", "contains": "vip"}}}, False),
        (
            {
                "all": [
                    {
                        "any": [
                            {"path": "payload.currency", "eq": "EUR"},
                            {"path": "context.channel", "eq": "email"},
                        ]
                    },
                    {"not": {"path": "payload.gift", "eq": True}},
                ]
            },
            True,
        ),
    ],
)
def test_combinators(when, expected):
    assert matches(when) is expected


def test_first_match_wins_and_the_trace_says_why():
    rules = [
        rule({"path": "payload.amount_cents", "gt": 10000}, name="big", then="review"),
        rule({"path": "payload.currency", "eq": "USD"}, name="usd", then="auto_approve"),
        rule(None, name="catch-all", then="auto_reject", reason="never reached"),
    ]
    verdict = engine.evaluate(rules, ACTION)
    assert (verdict.rule, verdict.outcome) == ("usd", "auto_approve")
    assert [(step["rule"], step["matched"]) for step in verdict.trace] == [
        ("big", False),
        ("usd", True),
    ]
    assert "payload.amount_cents gt 10000: 3000 → no" in verdict.trace[0]["why"]


def test_disabled_rules_are_skipped():
    rules = [
        rule(None, name="off", enabled=False, then="auto_reject", reason="x"),
        rule(None, name="on"),
    ]
    assert engine.evaluate(rules, ACTION).rule == "on"


@pytest.mark.parametrize(
    ("kind", "agent", "expected"),
    [
        ("payment.*", None, True),
        ("payment.refund", None, True),
        ("payment.charge", None, False),
        ("*", None, True),
        ("email.*", None, False),
        ("payment.*", "support-*", True),
        ("payment.*", "billing-bot", False),
    ],
)
def test_kind_and_agent_globs(kind, agent, expected):
    spec = {"kind": kind} if agent is None else {"kind": kind, "agent": agent}
    assert (engine.evaluate([rule(None, **spec)], ACTION).rule == "r") is expected


def test_nothing_matched_means_review_by_the_default_group():
    verdict = engine.evaluate([rule(None, kind="email.*")], ACTION)
    assert (verdict.outcome, verdict.rule, verdict.group) == ("review", None, None)
    assert verdict.trace[-1]["rule"] is None


def test_a_review_verdict_carries_its_settings():
    spec = {
        "group": "support-leads",
        "approvals_required": 2,
        "expires_in_s": 3600,
        "edit_bounds": {"payload.amount_cents": {"min": 1, "max": "original"}},
    }
    verdict = engine.evaluate([rule(None, then="review", **spec)], ACTION)
    assert (verdict.group, verdict.approvals_required, verdict.expires_in_s) == (
        "support-leads",
        2,
        3600,
    )
    assert verdict.edit_bounds == {"payload.amount_cents": {"min": 1, "max": "original"}}


@pytest.mark.parametrize(
    ("spec", "where"),
    [
        ({"name": "x", "then": "approve"}, "then"),
        ({"name": "x", "then": "auto_reject"}, "reason"),
        (
            {"name": "x", "then": "review", "when": {"path": "payload.a", "contain": 1}},
            "when.contain",
        ),
        ({"name": "x", "then": "review", "when": {"path": "payload.a", "eq": 1, "ne": 2}}, "when"),
        (
            {"name": "x", "then": "review", "when": {"all": {"path": "payload.a", "eq": 1}}},
            "when.all",
        ),
        (
            {"name": "x", "then": "review", "when": {"all": [{"path": "secret.a", "eq": 1}]}},
            "when.all[0].path",
        ),
        ({"name": "x", "then": "review", "when": {"path": "payload.a", "in": "USD"}}, "when.in"),
        ({"name": "x", "then": "review", "when": {"path": "payload.a", "lt": [1]}}, "when.lt"),
        ({"name": "x", "then": "review", "when": {"xor": []}}, "when.xor"),
        ({"name": "x", "then": "review", "approvals_required": 0}, "approvals_required"),
        (
            {"name": "x", "then": "review", "edit_bounds": {"payload.a": {"max": "more"}}},
            "edit_bounds.payload.a.max",
        ),
        (
            {"name": "x", "then": "review", "edit_bounds": {"payload.currency": {"eq": "USD"}}},
            "edit_bounds.payload.currency",
        ),
        (
            {"name": "x", "then": "review", "budget": {"per": "day", "sum": "count", "max": 5}},
            "budget",
        ),
        (
            {
                "name": "x",
                "then": "auto_approve",
                "budget": {"per": "week", "sum": "count", "max": 5},
            },
            "budget.per",
        ),
        (
            {
                "name": "x",
                "then": "auto_approve",
                "budget": {"per": "day", "sum": "dollars", "max": 5},
            },
            "budget.sum",
        ),
        ({"name": "x", "then": "review", "code": "__import__('os')"}, "code"),
    ],
)
def test_a_malformed_rule_is_refused_naming_the_rule_and_the_part(spec, where):
    with pytest.raises(engine.RuleError) as error:
        engine.parse_rule(spec)
    assert error.value.rule == "x"
    assert error.value.where == where
    assert str(error.value).startswith(f"rule 'x': {where}")


def test_duplicate_names_are_refused():
    with pytest.raises(engine.RuleError, match="more than one rule"):
        engine.parse_rules([{"name": "a", "then": "review"}, {"name": "a", "then": "review"}])


@pytest.mark.parametrize(
    ("bounds", "original", "value", "problem"),
    [
        ({"min": 1, "max": "original"}, 20000, 12000, None),
        ({"min": 1, "max": "original"}, 20000, 20000, None),
        ({"min": 1, "max": "original"}, 20000, 20001, "at most 20000"),
        ({"min": 1, "max": "original"}, 20000, 0, "at least 1"),
        ({"min": "original"}, 500, 499, "at least 500"),
        ({"max": 100}, 50, 100.5, "at most 100"),
        ({}, 50, 10**9, None),
    ],
)
def test_edit_bounds(bounds, original, value, problem):
    found = bound_problem(bounds, original, value)
    assert (found is None) if problem is None else (problem in found)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=10),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4)
    ),
    max_leaves=20,
)
ALL_RULES = engine.parse_rules(
    [
        {"name": f"{op}-{key}", "then": "review", "when": {"path": f"payload.{key}", op: value}}
        for op, value in [
            ("eq", 1),
            ("ne", "x"),
            ("lt", 5),
            ("lte", "m"),
            ("gt", 0.5),
            ("gte", 3),
            ("in", [1, "a"]),
            ("not_in", [None]),
            ("contains", "a"),
            ("exists", True),
        ]
        for key in ("amount_cents", "a", "a.b", "0")
    ]
    + [
        {
            "name": "combo",
            "then": "review",
            "when": {
                "any": [
                    {"all": [{"path": "flags", "contains": "x"}]},
                    {"not": {"path": "context.k", "exists": False}},
                ]
            },
        }
    ]
)


@settings(max_examples=300, deadline=None)
@given(
    payload=st.dictionaries(st.text(max_size=8), json_values, max_size=6),
    flags=json_values,
    context=json_values,
)
def test_the_engine_never_raises_on_arbitrary_json(payload, flags, context):
    action = {
        "kind": "payment.refund",
        "agent": "a",
        "payload": payload,
        "flags": flags,
        "context": context,
    }
    verdict = engine.evaluate(ALL_RULES, action)
    assert verdict.outcome == "review"
    assert len(verdict.trace) >= 1


leaf_rules = st.sampled_from([r.when for r in ALL_RULES if isinstance(r.when, engine.Leaf)])


@settings(max_examples=300, deadline=None)
@given(
    condition=leaf_rules,
    payload=st.dictionaries(st.sampled_from(["amount_cents", "a", "0"]), json_values),
)
def test_not_inverts_a_match(condition, payload):
    action = {"kind": "k", "agent": "a", "payload": payload, "flags": [], "context": {}}
    matched, _ = engine.check(condition, action)
    inverted, _ = engine.check(engine.Group("not", (condition,)), action)
    assert inverted is (not matched)


# --- Effective edit bounds -------------------------------------------------------------------

AMOUNT = "payload.amount_cents"


@pytest.mark.parametrize(
    ("payload", "rule", "push", "expected"),
    [
        ({"amount_cents": 8400}, {}, {}, {"min": 1, "max": "original"}),
        # Money that is zero, negative or not a whole number keeps the default: nothing passes.
        ({"amount_cents": 0}, {}, {}, {"min": 1, "max": "original"}),
        ({"amount_cents": "84"}, {}, {}, {"min": 1, "max": "original"}),
        ({"amount_cents": 8400}, {"max": 20000}, {}, {"min": 1, "max": 20000}),
        ({"amount_cents": 8400}, {"min": None}, {}, {"max": "original"}),
        ({"amount_cents": 8400}, {}, {"max": 9000}, {"min": 1, "max": "original"}),
        ({"amount_cents": 8400}, {}, {"max": 8000, "min": 0}, {"min": 1, "max": 8000}),
        ({"amount_cents": 8400}, {"min": None}, {"min": -3}, {"min": -3, "max": "original"}),
    ],
)
def test_effective_bounds(payload, rule, push, expected):
    money = {AMOUNT: "positive"}
    bounds = effective_bounds([AMOUNT], payload, {AMOUNT: rule}, {AMOUNT: push}, money)
    assert bounds == {AMOUNT: expected}


def test_a_field_that_is_not_money_starts_unbounded():
    assert effective_bounds([AMOUNT], {"amount_cents": 8400}, {}, {}, {}) == {AMOUNT: {}}


def test_a_negative_amount_of_a_kind_of_any_sign_may_only_shrink_toward_zero():
    bounds = effective_bounds([AMOUNT], {"amount_cents": -500}, {}, {}, {AMOUNT: "any"})
    assert bounds == {AMOUNT: {"min": "original", "max": -1}}
    assert bound_problem(bounds[AMOUNT], -500, -600)
    assert bound_problem(bounds[AMOUNT], -500, 0)
    assert not bound_problem(bounds[AMOUNT], -500, -200)


_limit = st.one_of(st.none(), st.integers(-(10**6), 10**6), st.just("original"))


@given(
    original=st.integers(1, 10**6),
    rule=st.fixed_dictionaries({}, optional={"min": _limit, "max": _limit}),
    push=st.fixed_dictionaries({}, optional={"min": _limit, "max": _limit}),
    value=st.integers(-(2**70), 2**70),
)
@settings(max_examples=300, deadline=None)
def test_an_agent_never_widens_what_the_rules_allow(original, rule, push, value):
    payload = {"amount_cents": original}
    money = {AMOUNT: "positive"}
    without = effective_bounds([AMOUNT], payload, {AMOUNT: rule}, {}, money)[AMOUNT]
    narrowed = effective_bounds([AMOUNT], payload, {AMOUNT: rule}, {AMOUNT: push}, money)[AMOUNT]
    if bound_problem(without, original, value):
        assert bound_problem(narrowed, original, value)
