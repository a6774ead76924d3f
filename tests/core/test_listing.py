"""One way to list actions: the REST list and the inbox page with the same selectors and keyset."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from django.db import connection
from django.test.utils import CaptureQueriesContext

from approvals.models import Action
from tests.factories import make_action

SAME_MOMENT = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def _page_queries(client, **params) -> tuple[dict, list[str]]:
    with CaptureQueriesContext(connection) as captured:
        body = client.get("/actions", **params).json()
    selects = [q["sql"] for q in captured.captured_queries if 'FROM "approvals_action"' in q["sql"]]
    return body, selects


def test_the_rest_list_pages_with_the_range_form_not_the_or_form(agent):
    for _ in range(3):
        make_action(agent.agent)
    client = agent.client()
    first = client.get("/actions", limit=1).json()
    body, selects = _page_queries(client, limit=1, cursor=first["next_cursor"])
    assert len(body["items"]) == 1
    listing = [sql for sql in selects if "ORDER BY" in sql]
    assert listing, selects
    where = listing[-1].split(" WHERE ", 1)[1].split(" ORDER BY ")[0]
    # created_at <= v AND NOT (created_at = v AND id >= i): one index range, no OR.
    assert re.search(r'"created_at" <= ', where), where
    assert re.search(r'NOT \(.*"created_at" = .*"id" >= ', where), where
    assert " OR " not in where, where


def test_the_rest_list_walks_actions_that_share_a_moment_once_each(agent):
    """The tie-breaker on id: a page boundary inside equal created_at loses and repeats nothing."""
    created = [make_action(agent.agent).pk for _ in range(5)]
    Action.objects.filter(pk__in=created).update(created_at=SAME_MOMENT)
    seen, cursor = [], None
    client = agent.client()
    while True:
        body = client.get("/actions", limit=2, **({"cursor": cursor} if cursor else {})).json()
        seen += [item["action_id"] for item in body["items"]]
        cursor = body["next_cursor"]
        if not cursor:
            break
    assert seen == sorted(created, reverse=True)


def test_the_rest_cursor_keeps_its_documented_shape(agent):
    for _ in range(2):
        make_action(agent.agent)
    cursor = agent.client().get("/actions", limit=1).json()["next_cursor"]
    micros, _, action_id = cursor.partition("_")
    assert micros.isdigit() and action_id.startswith("act_")
