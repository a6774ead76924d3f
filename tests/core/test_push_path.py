"""The push's path to its commit: what it reads before its transaction, and what it writes.

A push reads the idempotency key's action, the rule set's revision and the groups the
rules route to before its transaction (``approvals.services.pushing._first_read``), and
writes its action with one ORM ``INSERT``. What it costs the database is held in
``tests/core/test_query_budgets.py``.
"""

from __future__ import annotations

import pytest
from django.conf import settings
from django.contrib.auth.models import Group

from approvals import services
from approvals.errors import IdempotencyConflict
from approvals.models import Action
from approvals.schemas import ActionIn
from approvals.services import pushing
from rules import services as rule_services
from rules.models import RuleSet
from tests.factories import install_rules, refund

RULES = """
rules:
  - name: small refunds
    kind: payment.refund
    when: {path: payload.amount_cents, lte: 5000}
    then: auto_approve
    budget: {per: day, sum: payload.amount_cents, max: 100000000}
  - name: payments review
    kind: payment.*
    then: review
    group: support-leads
"""

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
    renamed = Group.objects.get(name="support-leads")
    renamed.name = "support-leads-old"
    renamed.save()  # as the admin renames it: the groups' cache (approvals.group_cache) forgets
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


@pytest.mark.django_db
def test_the_insert_stores_what_the_push_built(agent):
    """The push writes its action with one INSERT: read back, every field is as built."""
    install_rules(RULES)
    body = refund(12345)
    body.update(
        context={"customer": "Zoë", "nested": [1, 2.5, None, {"ok": True}]},
        flags=["policy_exception"],
        target_url="https://shop.example.com/orders/10432",
    )
    built, created = services.push_action(agent.agent, ActionIn(**body), idempotency_key="k-1")
    assert created and not built._state.adding
    stored = Action.objects.get(pk=built.pk)
    for field in Action._meta.concrete_fields:
        assert getattr(stored, field.attname) == getattr(built, field.attname), field.name
    assert stored.created_at.tzinfo is not None and stored.escalate_at is None
    assert stored.context["nested"][3] == {"ok": True}
    assert stored.review_group.name == "support-leads"


def test_a_bad_key_is_401_before_the_body_is_looked_at(agent):
    nobody = agent.__class__(key="imp_a_" + "0" * 40).client()
    for body in ("{not json", {"kind": 5}):
        response = nobody.post("/actions", body)
        assert response.status_code == 401, response.content
        assert response.json()["code"] == "not_authenticated"
