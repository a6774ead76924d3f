"""The approve request's path to its commit: the key first, then the decision's reads and write.

``approvals.services.deciding`` reads the reviewer's standing (group and ownership) in
one statement, writes the review with one ``INSERT … ON CONFLICT`` (``bulk_create`` with
``update_conflicts``: no savepoint), and counts and names the approvals in one read. Each
is held here to what the plain ORM calls it stands for answer on the same rows, on SQLite
and (in the PostgreSQL leg) on PostgreSQL. What the request costs the database is held in
``tests/core/test_query_budgets.py``.
"""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.utils import timezone

from approvals.models import Action, ActionStatus, Review
from approvals.services import deciding, selectors
from tests.conftest import make_agent, make_reviewer
from tests.factories import make_action

pytestmark = pytest.mark.django_db(transaction=True)

User = get_user_model()


def _approve(persona, action, body=None, headers=None):
    return persona.client().post(f"/actions/{action.pk}/approve", body or {}, headers=headers)


# --- The key before the body ------------------------------------------------------------


def test_a_bad_key_is_401_before_the_body_is_looked_at(agent, rita):
    action = make_action(agent.agent)
    nobody = make_agent("x").__class__(key="imp_r_" + "0" * 40)
    for persona in (nobody, nobody.__class__(key=None)):
        for body in ('{"edits": 5}', "{not json", {"payload_sha256": 7}):
            response = _approve(persona, action, body)
            assert response.status_code == 401, response.content
            assert response.json()["code"] == "not_authenticated"
    # With a good key the same bodies are refused for what they are.
    assert _approve(rita, action, "{not json").status_code == 400
    response = _approve(rita, action, '{"edits": 5}')
    assert response.status_code == 422 and response.json()["code"] == "invalid"
    # An agent's key: 403 from the view, as before.
    assert _approve(agent, action).status_code == 403
    assert Action.objects.get(pk=action.pk).status == ActionStatus.PENDING
    assert _approve(rita, action).status_code == 200


def test_reject_and_request_changes_check_the_key_first_too(agent, rita, mallory):
    first, second = make_action(agent.agent), make_action(agent.agent)
    bad = rita.__class__(key="imp_r_nope")
    assert rita.client().post(f"/actions/{first.pk}/reject", "{x").status_code == 400
    assert bad.client().post(f"/actions/{first.pk}/reject", "{x").status_code == 401
    assert mallory.client().post(f"/actions/{first.pk}/reject", {}).status_code == 404
    assert rita.client().post(f"/actions/{first.pk}/reject", {}).status_code == 200
    path = f"/actions/{second.pk}/request-changes"
    assert bad.client().post(path, {}).status_code == 401
    assert rita.client().post(path, {}).status_code == 422
    assert rita.client().post(path, {"note": "lower it"}).status_code == 200


# --- The folded reads and the upsert, each beside the plain ORM calls --------------------


def test_the_standing_reads_what_can_review_and_is_owned_by_read(agent):
    group = Group.objects.get_or_create(name="finance")[0]
    member = make_reviewer("st-member", "finance").user
    outsider = make_reviewer("st-outsider", "marketing").user
    owner = make_reviewer("st-owner", "finance").user
    agent.agent.owners.add(owner)
    root = User.objects.create_superuser("st-root", password="pw-st-root-1")
    asleep = make_reviewer("st-asleep", "finance").user
    asleep.is_active = False
    asleep.save()
    routed = make_action(agent.agent)
    Action.objects.filter(pk=routed.pk).update(review_group=group)
    unrouted = make_action(agent.agent)
    Action.objects.filter(pk=unrouted.pk).update(review_group=None)
    agent.agent.owners.add(root)
    seen = set()
    for action in (Action.objects.get(pk=routed.pk), Action.objects.get(pk=unrouted.pk)):
        for user in (member, outsider, owner, root, asleep):
            for owner_check in (True, False):
                got = deciding._standing(user, action, owner=owner_check)
                may = selectors.can_review(user, action)
                owns = owner_check and user.is_active and action.agent.is_owned_by(user)
                assert got == (may, owns), (user.username, action.review_group_id, owner_check)
                seen.add(got)
    assert {(True, True), (True, False), (False, False), (False, True)} == seen


def _review_fields(action, user) -> dict:
    review = Review.objects.get(action=action, reviewer=user)
    return {
        f.attname: getattr(review, f.attname)
        for f in Review._meta.concrete_fields
        if f.attname not in ("id", "at")
    } | {"at_set": review.at is not None}


def test_the_review_upsert_writes_what_update_or_create_writes(agent, rita, sam):
    plain, twin = make_action(agent.agent), make_action(agent.agent)
    edits = {"payload.amount_cents": 1200, "note ä": "✓ \u202e"}
    for verdict, written, note, key in (
        ("approve", edits, "first", "k-1"),
        ("reject", {}, "second thoughts", ""),
        (Review.Verdict.CHANGES, {}, "lower it", "k-2"),
    ):
        deciding._put_review(plain, rita.user, verdict, written, note, "d" * 64, key)
        Review.objects.update_or_create(
            action=twin,
            reviewer=rita.user,
            defaults={
                "verdict": verdict,
                "edits": written,
                "note": note,
                "payload_sha256": "d" * 64,
                "idempotency_key": key,
                "at": timezone.now(),
            },
        )
        mine, theirs = _review_fields(plain, rita.user), _review_fields(twin, rita.user)
        assert mine.pop("action_id") == plain.pk and theirs.pop("action_id") == twin.pk
        assert mine == theirs
    assert Review.objects.filter(action=plain).count() == 1  # rewritten in place
    deciding._put_review(plain, sam.user, "approve", {}, "", "e" * 64, "")
    assert Review.objects.filter(action=plain).count() == 2


def test_the_approvers_read_counts_and_names_what_the_orm_does(agent, rita, sam):
    action = make_action(agent.agent)
    third = make_reviewer("third", "marketing").user
    for user, verdict, digest in (
        (sam.user, "approve", "a" * 64),
        (rita.user, "approve", "a" * 64),
        (third, "reject", "a" * 64),
    ):
        deciding._put_review(action, user, verdict, {}, "", digest, "")
    for digest in ("a" * 64, "b" * 64):
        twin = list(
            action.reviews.filter(verdict=Review.Verdict.APPROVE, payload_sha256=digest)
            .order_by("at", "pk")
            .values_list("reviewer__username", "reviewer_id")
        )
        count = action.reviews.filter(verdict=Review.Verdict.APPROVE, payload_sha256=digest)
        assert deciding._approvers(action.pk, digest) == twin
        assert len(twin) == count.count()
    assert [name for name, _ in deciding._approvers(action.pk, "a" * 64)] == ["sam", "rita"]
