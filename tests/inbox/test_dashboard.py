"""The inbox dashboard: figures against a hand-computed fixture, bounded queries, CSV, who may see it."""

from __future__ import annotations

import csv
import io
from datetime import UTC, date, datetime, timedelta

import pytest
import time_machine
from django.contrib.auth.models import Group, Permission, User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from approvals.models import Action, Agent
from inbox import dashboard
from tests.conftest import make_agent
from tests.factories import make_action

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)
SINCE, UNTIL = date(2026, 3, 1), date(2026, 3, 3)
RANGE = {"since": "2026-03-01", "until": "2026-03-03"}


def at(day: int, hour: int = 9) -> datetime:
    return (
        datetime(2026, 3, day, hour, 0, tzinfo=UTC)
        if day > 0
        else datetime(2026, 2, 28, 9, tzinfo=UTC)
    )


def put(
    agent,
    *,
    day,
    status,
    by=None,
    after_s=None,
    rule="",
    by_rule="",
    amount=None,
    currency="USD",
    kind="payment.refund",
    group="reviewers",
    **extra,
) -> Action:
    payload = {"order_id": "1", "amount_cents": amount or 100, "currency": currency}
    action = make_action(agent, kind=kind, payload=payload)
    created = at(day)
    Action.objects.filter(pk=action.pk).update(
        created_at=created,
        expires_at=extra.pop("expires_at", created + timedelta(days=30)),
        status=status,
        decided_by_user=by,
        decided_by_rule=by_rule,
        decided_at=created + timedelta(seconds=after_s) if after_s is not None else None,
        rule_name=rule,
        payload=payload,
        review_group=Group.objects.get_or_create(name=group)[0],
        **extra,
    )
    return action


@pytest.fixture
def history(agent, rita, sam):
    """Ten actions in the range and two outside it; the expected figures are in the tests."""
    a, r, s = agent.agent, rita.user, sam.user
    review = "everything else in payments"
    with time_machine.travel(NOW, tick=False):
        put(a, day=1, status="executed", by=r, after_s=60, rule=review, amount=8400)
        put(
            a,
            day=1,
            status="executed",
            after_s=0,
            rule="small refunds",
            by_rule="small refunds",
            amount=3000,
        )
        put(a, day=1, status="rejected", by=s, after_s=300, rule=review)
        put(
            a, day=2, status="executed", by=s, after_s=600, rule=review, amount=1000, currency="EUR"
        )
        put(a, day=2, status="pending", expires_at=at(3))  # overdue, not yet swept
        put(a, day=2, status="expired", group="support-leads", after_s=86400)
        put(a, day=3, status="approved", by=r, after_s=1200, rule=review, stale_flagged_at=at(4))
        put(a, day=3, status="cancelled", after_s=10)
        put(a, day=3, status="pending", expires_at=at(20))
        put(a, day=3, status="failed", by=r, after_s=30, rule=review, amount=500)
        put(a, day=0, status="executed", by=r, after_s=5, rule=review, amount=99999)  # Feb 28
        put(a, day=4, status="executed", by=r, after_s=5, rule=review, amount=99999)  # Mar 4


def test_the_figures_match_the_hand_computed_fixture(history):
    with CaptureQueriesContext(connection) as queries:
        f = dashboard.figures(SINCE, UNTIL, now=NOW)
    assert len(queries) == 5  # outcomes, decision times, refunds twice, stale list: never more
    assert f.pushed == 10
    assert dict(f.totals) == {
        "approved": 5,
        "rejected": 1,
        "expired": 2,
        "cancelled": 1,
        "pending": 1,
    }
    assert [d.pushed for d in f.days] == [3, 3, 4]
    assert dict(f.days[1].outcomes) == {"approved": 1, "expired": 2}
    # People's decisions: 60, 300 | 600 | 1200, 30 seconds. Nearest rank of [30, 60, 300, 600, 1200].
    assert (f.median_s, f.p90_s) == (300, 1200)
    assert [(d.median_s, d.p90_s) for d in f.days] == [(60, 300), (600, 600), (30, 1200)]
    assert f.refunded_total == {"EUR": 1000, "USD": 11400}
    assert f.refunded_rows("reviewer") == [
        ("rita", "USD", 8400, 1),
        ("rule: small refunds", "USD", 3000, 1),
        ("sam", "EUR", 1000, 1),
    ]
    assert f.refunded_rows("agent") == [
        ("support-bot", "USD", 11400, 2),
        ("support-bot", "EUR", 1000, 1),
    ]
    assert f.refunded_rows("rule") == [
        ("everything else in payments", "USD", 8400, 1),
        ("small refunds", "USD", 3000, 1),
        ("everything else in payments", "EUR", 1000, 1),
    ]
    assert f.stale_count == 1 and f.stale[0].approved_at == at(3) + timedelta(seconds=1200)
    assert dict(f.expired_by_group) == {"reviewers": 1, "support-leads": 1}


def test_an_empty_range_has_no_figures_and_no_error(history):
    f = dashboard.figures(date(2025, 1, 1), date(2025, 1, 31), now=NOW)
    assert f.pushed == 0 and f.median_s is None and f.refunded_total == {}
    assert len(f.days) == 31


@pytest.fixture
def lead(db) -> Client:
    """A finance lead: not staff, granted the dashboard through a group."""
    finance = Group.objects.create(name="finance")
    finance.permissions.add(Permission.objects.get(codename="view_dashboard"))
    user = User.objects.create_user("fiona", password="fiona-password")
    user.groups.add(finance)
    client = Client()
    client.force_login(user)
    return client


def test_the_page_shows_the_figures_as_svg_under_the_csp(history, lead):
    with time_machine.travel(NOW, tick=False):
        response = lead.get("/inbox/dashboard/", RANGE)
    assert response.status_code == 200
    html = response.content.decode()
    assert "Content-Security-Policy" in response
    assert html.count('<svg class="chart"') == 2  # by day: volume, time to decision
    assert html.count('<svg class="bar"') == 8  # one a refund row (rule 3, agent 2, reviewer 3)
    assert 'data-figure="pushed">10<' in html
    assert 'data-figure="median">5 min<' in html  # 300 s
    assert 'data-figure="p90">20 min<' in html  # 1200 s
    assert "€10.00 EUR" in html and "$114.00 USD" in html
    assert 'data-figure="stale">1<' in html
    assert "style=" not in html and "<script>" not in html
    assert 'aria-current="page">Dashboard' in html
    assert 'href="?since=2026-03-01&amp;until=2026-03-03&amp;export=daily"' in html
    assert 'value="2026-03-01"' in html and 'value="2026-03-03"' in html


def test_without_a_range_it_shows_the_last_30_days(lead):
    with time_machine.travel(NOW, tick=False):
        html = lead.get("/inbox/dashboard/").content.decode()
    assert 'value="2026-02-09"' in html and 'value="2026-03-10"' in html


def test_the_number_of_queries_does_not_grow_with_the_data(history, lead, agent):
    def count() -> int:
        with time_machine.travel(NOW, tick=False), CaptureQueriesContext(connection) as q:
            assert lead.get("/inbox/dashboard/", RANGE).status_code == 200
        return len(q)

    before = count()
    for n in range(15):
        put(
            agent.agent,
            day=1 + n % 3,
            status="executed",
            after_s=n,
            rule=f"r{n}",
            by_rule=f"r{n}",
            amount=n + 1,
        )
    # session, user, its two kinds of second factor (TOTP, passkey), permissions (two) and
    # the five figure queries, and the reconciliation panel's two (ledger.selectors.summary)
    assert count() == before <= 13


def test_the_daily_csv_matches_the_figures(history, lead):
    with time_machine.travel(NOW, tick=False):
        response = lead.get("/inbox/dashboard/", {**RANGE, "export": "daily"})
    assert response["Content-Type"].startswith("text/csv")
    assert "impri-daily-20260301-20260303.csv" in response["Content-Disposition"]
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert [r["date"] for r in rows] == ["2026-03-01", "2026-03-02", "2026-03-03"]
    assert [r["pushed"] for r in rows] == ["3", "3", "4"]
    assert rows[1]["expired"] == "2" and rows[2]["pending"] == "1"
    assert [r["median_decision_s"] for r in rows] == ["60", "600", "30"]
    assert [r["p90_decision_s"] for r in rows] == ["300", "600", "1200"]
    assert [r["refunded_cents_USD"] for r in rows] == ["11400", "0", "0"]
    assert [r["refunded_cents_EUR"] for r in rows] == ["0", "1000", "0"]


def test_the_refunds_csv_defuses_formulas_in_names(db, lead):
    evil = make_agent("evil-bot")  # renamed as agents could be before names were slugs
    Agent.objects.filter(pk=evil.agent.pk).update(name="=HYPERLINK(1)")
    evil.agent.refresh_from_db()
    with time_machine.travel(NOW, tick=False):
        put(
            evil.agent,
            day=2,
            status="executed",
            after_s=0,
            rule="small",
            by_rule="small",
            amount=700,
        )
        response = lead.get("/inbox/dashboard/", {**RANGE, "export": "refunds"})
    rows = list(csv.reader(io.StringIO(response.content.decode())))
    assert rows[0] == ["by", "name", "currency", "refunded_cents", "refunds"]
    assert ["agent", "'=HYPERLINK(1)", "USD", "700", "1"] in rows


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"since": "yesterday"}, "since"),
        ({"until": "2026-13-01"}, "until"),
        ({"since": "2026-03-05", "until": "2026-03-01"}, "since"),
        ({"since": "2020-01-01", "until": "2026-03-01"}, "since"),
        ({"export": "xlsx"}, "export"),
    ],
)
def test_a_bad_range_is_refused_naming_the_field(lead, params, field):
    response = lead.get("/inbox/dashboard/", params)
    assert response.status_code == 400
    assert f"({field})" in response.content.decode()


def test_a_reviewer_without_the_permission_is_refused(rita):
    client = Client()
    client.force_login(rita.user)
    assert client.get("/inbox/dashboard/").status_code == 403
    assert "/inbox/dashboard/" not in client.get("/inbox/").content.decode()


def test_staff_may_see_it_and_anonymous_users_log_in_first(db):
    staff = User.objects.create_user("olga", password="x", is_staff=True)
    client = Client()
    assert client.get("/inbox/dashboard/").status_code == 302
    client.force_login(staff)
    assert client.get("/inbox/dashboard/").status_code == 200
