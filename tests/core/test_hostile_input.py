"""Hostile input answers 4xx naming the field, and nothing stored is unrenderable.

The quick, in-process half of tests/core/test_hostile_corpus.py (which drives a
real server): exact status codes, fields and messages.
"""

from __future__ import annotations

import json

import pytest
from django.db import DataError, transaction
from django.test import Client

from approvals.models import Action
from approvals.schemas import MAX_JSON_DEPTH, json_problem
from tests.conftest import SCALED
from tests.factories import make_action, refund_body


def _deep(levels: int) -> dict:
    node: dict = {"leaf": 1}
    for _ in range(levels - 1):
        node = {"a": node}
    return node


def _raw_push(agent, text: str):
    return agent.client().post("/actions", text)


BASE = json.dumps(refund_body(context={"slot": "S"}), ensure_ascii=True)


@pytest.mark.parametrize(
    ("text", "field", "words"),
    [
        (
            BASE.replace('"S"', json.dumps(_deep(MAX_JSON_DEPTH + 1))),
            "context.slot.a",
            "deeper than 64",
        ),
        (BASE.replace('"slot": "S"', '"\\ud83d": "x"'), "context.\\ud83d", "lone surrogate"),
        (BASE.replace('"S"', '"ab\\udc00"'), "context.slot", "lone surrogate"),
        (BASE.replace('"S"', "NaN"), "context.slot", "NaN and Infinity"),
        (BASE.replace('"S"', "-Infinity"), "context.slot", "NaN and Infinity"),
        (BASE.replace('"S"', "1e400"), "context.slot", "NaN and Infinity"),
        (BASE.replace("8400,", f"{10**21},"), "payload.amount_cents", "below 10^21"),
        (BASE.replace('"S"', '"a\\u0000"'), "context.slot", "NUL"),
        (BASE.replace('"Refund', '"\\u0000Refund'), "title", "NUL"),
    ],
)
def test_unstorable_json_is_refused_naming_the_field(agent, text, field, words):
    response = _raw_push(agent, text)
    assert response.status_code == 422, response.content
    body = response.json()
    assert body["field"].startswith(field), body
    assert words in body["detail"]
    assert not Action.objects.exists()


def test_json_nested_exactly_64_deep_is_accepted(agent):
    text = BASE.replace('"S"', json.dumps(_deep(MAX_JSON_DEPTH - 1)))
    assert _raw_push(agent, text).status_code == 201


def test_a_body_that_is_not_json_is_a_400_naming_the_body(agent):
    response = _raw_push(agent, "{nope")
    assert response.status_code == 400
    assert response.json() == {
        "detail": "body: is not valid JSON",
        "code": "bad_request",
        "field": "body",
    }


def test_the_depth_check_needs_no_recursion():
    assert json_problem(_deep(50_000), "payload").endswith("nested deeper than 64 levels")


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("approve", {"note": "ok\x00"}, "note"),
        (
            "approve",
            {"edits": {"payload.amount_cents": float("nan")}},
            "edits.payload.amount_cents",
        ),
        ("reject", {"note": "\x00"}, "note"),
    ],
)
def test_hostile_decisions_are_refused_and_change_nothing(agent, rita, path, body, field):
    action = make_action(agent.agent)
    response = rita.client().post(f"/actions/{action.pk}/{path}", json.dumps(body))
    assert response.status_code == 422, response.content
    assert response.json()["field"] == field
    action.refresh_from_db()
    assert action.status == "pending"


def test_a_nul_in_a_cancel_reason_is_refused(agent):
    action = make_action(agent.agent)
    response = agent.client().post(f"/actions/{action.pk}/cancel", {"reason": "x\x00"})
    assert response.status_code == 422 and response.json()["field"] == "reason"


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("/actions?kind=a%00b", "kind"),
        ("/actions/act_%00", "path"),
        ("/audit?until=9999-12-31T23:59:59-12:00", "until"),
        ("/audit?since=0001-01-01T00:00:00%2B14:00", "since"),
        ("/audit?until=2026-01-01", "until"),
        ("/audit?until=1767225600", "until"),
        ("/audit?after=99999999999999999999999", "after"),
    ],
)
def test_hostile_query_parameters_are_422_naming_them(rita, query, field, settings):
    rita.user.is_staff = True
    rita.user.save()
    response = Client().get("/api/v1" + query, headers={"Authorization": f"Bearer {rita.key}"})
    assert response.status_code == 422, response.content
    assert response.json()["field"] == field


@pytest.mark.parametrize(
    "query",
    [
        "amount_min=1e400",
        "amount_max=99999999999999999999999999",
        "group=99999999999999999999999",
        "amount_min=NaN",
    ],
)
def test_huge_inbox_filters_are_dropped_not_a_500(rita, agent, query):
    make_action(agent.agent)
    client = Client()
    client.force_login(rita.user)
    response = client.get("/inbox/?" + query)
    assert response.status_code == 200
    name = query.partition("=")[0]
    assert response.context["form"].errors[name], "the bad filter is reported on the form"


def test_a_nul_in_an_inbox_query_is_a_400(rita):
    client = Client()
    client.force_login(rita.user)
    assert client.get("/inbox/?q=%00").status_code == 400
    assert client.get("/inbox/actions/act_%00").status_code == 400


def _poison(action: Action) -> None:
    Action.objects.filter(pk=action.pk).update(
        context={"\ud83d": "x"}, result_detail={"k": "\udc00"}
    )


@pytest.mark.django_db(transaction=True)
def test_a_stored_lone_surrogate_renders_safely_in_the_inbox_and_admin(agent, rita):
    action = make_action(agent.agent)
    if SCALED:
        # PostgreSQL's jsonb can't hold one at all: the poison can't be stored there.
        with pytest.raises(DataError), transaction.atomic():
            _poison(action)
        return
    _poison(action)
    rita.user.is_staff = rita.user.is_superuser = True
    rita.user.save()
    client = Client()
    client.force_login(rita.user)
    for path in (f"/inbox/actions/{action.pk}", f"/admin/approvals/action/{action.pk}/change/"):
        response = client.get(path)
        assert response.status_code == 200, path
        assert "U+D83D" in response.content.decode(), path


@pytest.mark.parametrize(
    "data",
    [
        {"approve-verdict": "approve", "approve-note": "ok\x00"},
        {"approve-verdict": "approve", "approve-payload.amount_cents": "50\x00"},
        {"reject-verdict": "reject", "reject-note": "no\x00", "reject-reason": "other"},
    ],
)
def test_a_nul_in_the_inbox_decision_forms_is_refused_on_the_form(agent, rita, data):
    action = make_action(agent.agent)
    client = Client()
    client.force_login(rita.user)
    response = client.post(f"/inbox/actions/{action.pk}/decide", data)
    assert response.status_code == 422, response.status_code
    action.refresh_from_db()
    assert action.status == "pending"
