"""The push's path to its commit: the one read before the transaction, and prepared statements.

A push reads the idempotency key's action, the rule set's revision and the groups the
rules route to in one statement (``approvals.services.pushing._first_read``), and on
PostgreSQL the statements it runs by hand (and its ORM ``INSERT``) are prepared on their
connection (``compat.django.prepared_cursor``, ``preparing``). docs/benchmarks.md, "A push
near the floor (issue 34)".
"""

from __future__ import annotations

import uuid

import pytest
from django.conf import settings
from django.contrib.auth.models import Group
from django.db import connection, connections

from approvals import services
from approvals.errors import IdempotencyConflict
from approvals.models import Action
from approvals.schemas import ActionIn
from approvals.services import pushing
from compat.django import prepared_cursor, preparing
from rules import services as rule_services
from rules.models import RuleSet
from tests.core.test_push_statements import RULES, statements
from tests.factories import install_rules, refund
from tests.threads import count_hops

ELSEWHERE = """
rules:
  - name: payments to finance
    kind: payment.*
    then: review
    group: finance
"""


def _push(agent, amount: int, key: str | None = None):
    return services.push_action(agent.agent, ActionIn(**refund(amount)), idempotency_key=key)


def _twins(agent, key: str | None, names: list[str]):
    """The three reads the first read folds, each through the ORM."""
    existing = (
        Action.objects.filter(agent=agent, idempotency_key=key)
        .values_list("pk", "request_hash")
        .first()
        if key
        else None
    )
    revision = RuleSet.objects.filter(pk=1).values_list("version", "revision").first() or (0, "")
    groups = dict(Group.objects.filter(name__in=names).values_list("name", "pk"))
    return existing, tuple(revision), groups


def _read(agent, key):
    first = pushing._first_read(agent, key)
    existing = (first.existing.pk, first.existing.request_hash) if first.existing else None
    groups = {name: group.pk for name, group in first.groups.found.items()}
    return existing, first.revision, groups, sorted(first.groups.asked)


@pytest.mark.django_db(transaction=True)
def test_the_first_read_reads_what_the_three_reads_it_folds_read(agent, other_agent):
    assert _read(agent.agent, "k-1")[:3] == _twins(agent.agent, "k-1", [])[:2] + ({},)
    install_rules(RULES)
    mine, _ = _push(agent, 1200, "k-1")
    _push(other_agent, 1200, "k-1")  # the same key, another agent: not mine
    for key in ("k-1", "k-2", None):
        existing, revision, groups, asked = _read(agent.agent, key)
        assert asked == sorted({"support-leads", settings.IMPRI_DEFAULT_GROUP})
        assert (existing, revision, groups) == _twins(agent.agent, key, asked)
    assert _read(agent.agent, "k-1")[0][0] == mine.pk
    assert _read(agent.agent, "k-2")[0] is None


@pytest.mark.django_db(transaction=True)
def test_a_push_routes_by_new_rules_to_a_group_the_first_read_did_not_ask_for(agent):
    install_rules(RULES)
    _push(agent, 9000)  # the process now holds these rules: it asks for support-leads
    Group.objects.create(name="finance")
    install_rules(ELSEWHERE)  # another process's change: the revision moves
    action, created = _push(agent, 9000, "after")
    assert created and action.review_group.name == "finance"
    assert action.rule_name == "payments to finance"
    assert Action.objects.get(pk=action.pk).review_group.name == "finance"


@pytest.mark.django_db(transaction=True)
def test_a_renamed_group_is_read_again_on_the_next_push(agent):
    install_rules(RULES)
    first, _ = _push(agent, 9000)
    assert first.review_group.name == "support-leads"
    Group.objects.filter(name="support-leads").update(name="support-leads-old")
    second, _ = _push(agent, 9000)
    # The rule's group is gone: the default group, with a trace line saying so.
    assert second.review_group.name == settings.IMPRI_DEFAULT_GROUP
    assert any("does not exist" in line["why"] for line in second.rule_trace)


@pytest.mark.django_db(transaction=True)
def test_a_replay_is_answered_from_the_first_read_and_a_misuse_refused(agent):
    install_rules(RULES)
    action, created = _push(agent, 9000, "same")
    again, created_again = _push(agent, 9000, "same")
    assert created and not created_again and again.pk == action.pk
    with pytest.raises(IdempotencyConflict):
        _push(agent, 9100, "same")
    assert Action.objects.filter(agent=agent.agent).count() == 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("amount", [1000, 9000], ids=["auto-approved", "to review"])
def test_a_push_runs_five_statements_on_postgresql_seven_on_sqlite(agent, amount):
    """The key; the first read; the budget or the group's channels; the INSERT; the audit
    append (one function call on PostgreSQL; the head's lock, the events and the head's
    move on SQLite). An auto-approval also stores its grant (issue 40)."""
    install_rules(RULES)
    statements(agent, refund(amount))  # the first push of a process reads what it caches
    sql = statements(agent, refund(amount))
    grant = 1 if amount == 1000 else 0
    assert len(sql) <= (5 if connection.vendor == "postgresql" else 7) + grant, "\n".join(sql)


@pytest.mark.django_db(transaction=True)
def test_the_push_statements_are_prepared_on_postgresql(agent):
    if connection.vendor != "postgresql":
        pytest.skip("SQLite has no prepared statements to see")
    install_rules(RULES)
    for amount in (1000, 9000, 1000, 9000, 1000, 9000, 1000):
        agent.client().post(
            "/actions", refund(amount), headers={"Idempotency-Key": uuid.uuid4().hex}
        )
    # The API's work ran on this thread's connection (a sync caller: Django's test client).
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements WHERE NOT from_sql")
        prepared = " ".join(row[0] for row in cursor.fetchall())
    for table in ("approvals_apikey", "rules_ruleset", "approvals_action", "impri_audit_append"):
        assert table in prepared, table
    assert 'INSERT INTO "approvals_action"' in prepared
    assert "rules_budgetcounter" in prepared


@pytest.mark.django_db(transaction=True)
def test_a_prepared_cursor_reads_what_a_plain_one_reads(agent):
    install_rules(RULES)
    action, _ = _push(agent, 1200, "k")
    sql = "SELECT id, created_at, payload, amount_minor FROM approvals_action WHERE id = %s"
    with connection.cursor() as cursor:
        cursor.execute(sql, [action.pk])
        plain = cursor.fetchone()
    for _ in range(3):  # prepared on the first run, then run as prepared
        with prepared_cursor(connection) as cursor:
            cursor.execute(sql, [action.pk])
            assert cursor.fetchone() == plain
    if connection.vendor == "postgresql":  # the driver's loaders, with the backend's timezone
        assert plain[1].tzinfo is not None and "1200" in str(plain[2])


@pytest.mark.django_db(transaction=True)
def test_preparing_gives_the_connection_its_own_cursors_back(agent):
    with preparing(connection):
        with preparing(connection):
            Group.objects.create(name="inside")
        Group.objects.create(name="after the inner block")
    assert "create_cursor" not in vars(connections["default"])
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            assert type(cursor.cursor).__name__ == "Cursor"  # Django's client-side binding
    assert Group.objects.filter(name="inside").exists()


@pytest.mark.django_db(transaction=True)
def test_the_cached_group_names_are_the_groups_the_held_rules_route_to(agent):
    saved = rule_services._loaded
    rule_services._loaded = None
    try:
        assert rule_services.cached_group_names() == set()
        install_rules(RULES)
        _push(agent, 9000)  # loads and holds the rules
        assert rule_services.cached_group_names() == {"support-leads"}
        assert _read(agent.agent, None)[3] == sorted(
            {"support-leads", settings.IMPRI_DEFAULT_GROUP}
        )
    finally:
        rule_services._loaded = saved


def test_an_agents_calls_make_one_hop_to_the_pool_and_a_bad_key_is_401_first(agent, monkeypatch):
    calls = count_hops(monkeypatch)
    client = agent.client()
    response = client.post("/actions", refund(amount_cents=8400))
    assert response.status_code == 201, response.content
    action_id = response.json()["action_id"]
    assert client.get(f"/actions/{action_id}").status_code == 200
    assert client.get("/actions").status_code == 200
    assert client.post(f"/actions/{action_id}/cancel", {"reason": "x"}).status_code == 200
    # The key check, the body and the view: one hop each, not two.
    assert calls == ["_in_hop"] * 4
    nobody = agent.__class__(key="imp_a_" + "0" * 40).client()
    for body in ("{not json", {"kind": 5}):
        response = nobody.post("/actions", body)
        assert response.status_code == 401, response.content
        assert response.json()["code"] == "not_authenticated"
