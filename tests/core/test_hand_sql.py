"""The hand-written SQL that is left, each statement run beside its ORM twin on the same rows.

The ORM is the rule; a statement stays plain SQL only where docs/benchmarks.md
("Hand-written SQL and the ORM") measured its ORM twin as a real share of a push.
Each one kept must read or write exactly what the twin does, on SQLite and (in the
PostgreSQL leg) on PostgreSQL: these tests run both and compare.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.contrib.auth import get_user_model
from django.db.models import F
from django.utils import timezone

from approvals.models import Action, ApiKey, hash_key
from approvals.services import pushing
from identity import keys
from rules import services as rule_services
from rules.models import BudgetCounter, RuleSet
from tests.factories import install_rules, make_action

pytestmark = pytest.mark.django_db


def _fields(instance) -> dict | None:
    if instance is None:
        return None
    return {f.attname: getattr(instance, f.attname) for f in type(instance)._meta.concrete_fields}


# --- The key check (identity.keys._active_key): every API call and MCP session ---------------


def _key_twin(key_hash: str) -> ApiKey | None:
    return ApiKey.objects.active().select_related("agent", "user").filter(key_hash=key_hash).first()


def test_the_key_check_reads_what_its_orm_twin_reads():
    agent, agent_raw = keys.create_agent("twin-bot", description="ä ✓ \u202e")
    user = get_user_model().objects.create_user("twin-rita", password="pw-twin-rita-1")
    _, token_raw = keys.create_reviewer_token(user, label="ci", is_service=True)
    revoked, revoked_raw = keys.create_agent_key(agent, label="old")
    keys.revoke_key(revoked)
    ApiKey.objects.filter(pk=revoked.pk).update(last_used_at=timezone.now())
    hashes = [hash_key(raw) for raw in (agent_raw, token_raw, revoked_raw)] + ["0" * 64]
    seen = []
    for key_hash in hashes:
        plain, twin = keys._active_key(key_hash), _key_twin(key_hash)
        assert _fields(plain) == _fields(twin), key_hash
        if twin is None:
            continue
        seen.append(twin.kind)
        assert _fields(plain.agent if plain.agent_id else None) == _fields(twin.agent)
        assert _fields(plain.user if plain.user_id else None) == _fields(twin.user)
        assert type(plain.is_service) is bool and not plain._state.adding
        assert plain._state.db == twin._state.db
    assert seen == ["agent", "reviewer"]  # the revoked key and the unknown hash: None alike


# --- The idempotency check (approvals.services.pushing._with_key): every push with a key ------


def _with_key_twin(agent, key: str) -> Action | None:
    found = Action.objects.filter(agent=agent, idempotency_key=key)
    return found.only("id", "idempotency_key", "request_hash").first()


def _replayable(action: Action | None):
    return None if action is None else (action.pk, action.idempotency_key, action.request_hash)


def test_the_idempotency_check_reads_what_its_orm_twin_reads(agent, other_agent):
    mine = make_action(agent.agent, idempotency_key="order-1")
    make_action(other_agent.agent, idempotency_key="order-2")
    make_action(agent.agent)  # no key
    cases = [
        (agent.agent, "order-1"),
        (agent.agent, "order-2"),  # another agent's key
        (other_agent.agent, "order-1"),
        (agent.agent, "ORDER-1"),
        (agent.agent, ""),
    ]
    for owner, key in cases:
        plain, twin = pushing._with_key(owner, key), _with_key_twin(owner, key)
        assert _replayable(plain) == _replayable(twin), (owner, key)
    assert _replayable(pushing._with_key(agent.agent, "order-1"))[0] == mine.pk


# --- The routed groups (approvals.services.pushing._groups_named): every push ---------------


def test_the_group_read_reads_what_its_orm_twin_reads():
    from django.contrib.auth.models import Group

    for name in ("support-leads", "Support-Leads", "reviewers ä"):
        Group.objects.get_or_create(name=name)
    cases = [
        ("support-leads", "reviewers ä"),
        ("reviewers ä", "reviewers ä"),
        ("support-leads", "missing"),
        ("missing", "also missing"),
    ]
    for first, second in cases:
        plain = pushing._groups_named(first, second)
        twin = {g.name: g for g in Group.objects.filter(name__in=(first, second))}
        assert {n: _fields(g) for n, g in plain.items()} == {
            n: _fields(g) for n, g in twin.items()
        }, (first, second)
        assert all(not g._state.adding for g in plain.values())


# --- The rule set's revision (rules.services._revision): every push -------------------------


def _revision_twin() -> tuple[int, str]:
    return RuleSet.objects.filter(pk=1).values_list("version", "revision").first() or (0, "")


def test_the_revision_read_reads_what_its_orm_twin_reads():
    RuleSet.objects.filter(pk=1).delete()
    assert rule_services._revision() == _revision_twin() == (0, "")
    install_rules()
    first = rule_services._revision()
    assert first == _revision_twin() and first[0] >= 1 and len(first[1]) == 32
    install_rules()
    assert rule_services._revision() == _revision_twin() != first


# --- The budget's reservation (rules.services._add_within): every auto-approved push ---------

WINDOW = datetime(2026, 12, 5, 10, 0, tzinfo=UTC)


def _add_within_twin(rule: str, scope: str, start, amount, at_most) -> bool:
    counters = BudgetCounter.objects.filter(
        rule=rule, scope=scope, window_start=start, total__lte=at_most
    )
    return counters.update(total=F("total") + amount) == 1


# (amount, at most): whole and fractional cents, the boundary, past it, large figures.
STEPS = [
    (Decimal(1), Decimal(10)),
    (Decimal("2.5"), Decimal("1.5")),  # the total (1) is under 1.5: added
    (Decimal("0.000001"), Decimal("3.5")),  # 3.5 exactly: added
    (Decimal(5), Decimal("3.5")),  # 3.500001 is over: refused
    (Decimal(10) ** 20, Decimal(10) ** 21),
    (Decimal(7), Decimal(10) ** 20),  # over
    (Decimal(0), Decimal(10) ** 21),
]


@pytest.mark.parametrize("window", [WINDOW, WINDOW + timedelta(days=1)], ids=["hour", "next"])
def test_the_budget_reservation_writes_what_its_orm_twin_writes(window):
    for rule in ("plain", "twin"):
        BudgetCounter.objects.create(rule=rule, scope="agent#1", window_start=WINDOW)
    for amount, at_most in STEPS:
        plain = rule_services._add_within("plain", "agent#1", window, amount, at_most)
        twin = _add_within_twin("twin", "agent#1", window, amount, at_most)
        assert plain == twin, (amount, at_most)
        totals = dict(BudgetCounter.objects.values_list("rule", "total"))
        assert totals["plain"] == totals["twin"], (amount, at_most)
    assert plain is (window == WINDOW)  # the last step was added only in the counter's window
    assert (totals["plain"] >= 10**20) is (window == WINDOW)
