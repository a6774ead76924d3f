"""Queue page benchmark (not a test): the inbox with 100,000 pending actions.

    python bench/queue_page.py [--actions 100000] [--decided 20000] [--repeat 20]

Fills a fresh database (a new PostgreSQL database when DATABASE_URL is set,
else SQLite in a temporary IMPRI_DATA_DIR), then times whole requests through
Django's test client: URL routing, middleware, session, the queries, template
rendering. Prints a Markdown table of median and p95 milliseconds and the
number of SQL queries per request; docs/benchmarks.md keeps the results.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.audit import setup_database  # noqa: E402

KINDS = ["payment.refund", "payment.chargeback", "email.send", "crm.update", "deploy.release"]
AGENTS = ["support-bot", "billing-bot", "mailer", "crm-sync", "release-bot"]


def fill(pending: int, decided: int) -> None:
    """Bulk-insert actions directly: the benchmark is about reading them, not pushing."""
    from django.contrib.auth.models import Group, User
    from django.db import connection
    from django.utils import timezone

    from approvals.models import Action, ActionStatus, Agent, new_action_id

    rng = random.Random(42)
    reviewers = Group.objects.create(name="reviewers")
    finance = Group.objects.create(name="finance")
    rita = User.objects.create_user("rita", password="x")
    rita.groups.add(reviewers, finance)
    User.objects.create_user("outsider", password="x")
    agents = [Agent.objects.create(name=name) for name in AGENTS]
    now = timezone.now()

    def action(status: str) -> Action:
        cents = rng.randint(100, 200_000)
        payload = {
            "order_id": str(rng.randint(10_000, 99_999)),
            "amount_cents": cents,
            "currency": "USD",
        }
        created = now - timedelta(seconds=rng.randint(0, 7 * 86400))
        settled = status != ActionStatus.PENDING
        return Action(
            id=new_action_id(),
            agent=rng.choice(agents),
            kind=rng.choice(KINDS),
            title=f"Refund ${cents / 100:.2f} on order {payload['order_id']}",
            preview_format="markdown",
            preview_body="Customer reports a damaged item.",
            payload=payload,
            original_payload=payload,
            amount_minor=cents,  # what a push computes (approvals.money)
            amount_currency="USD",
            context={"customer_message": "It arrived broken."},
            editable=["payload.amount_cents"],
            request_hash="0" * 64,
            created_at=created,
            expires_at=now + timedelta(seconds=rng.randint(600, 30 * 86400)),
            status=status,
            review_group=reviewers if rng.random() < 0.8 else finance,
            decided_by_user=rita if settled else None,
            decided_at=created + timedelta(minutes=5) if settled else None,
        )

    batch = 5000
    for start in range(0, pending, batch):
        Action.objects.bulk_create(
            [action(ActionStatus.PENDING) for _ in range(min(batch, pending - start))]
        )
    statuses = [ActionStatus.APPROVED, ActionStatus.REJECTED]
    for start in range(0, decided, batch):
        Action.objects.bulk_create(
            [action(rng.choice(statuses)) for _ in range(min(batch, decided - start))]
        )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")


NEWEST_INDEX = {"fields": ["status", "-created_at", "-id"], "name": "action_status_newest"}


def drop_newest_index() -> None:
    """Remove the queue's (status, -created_at, -id) index, to measure the schema without it."""
    from django.db import connection, models

    from approvals.models import Action

    with connection.schema_editor() as editor:
        editor.remove_index(Action, models.Index(**NEWEST_INDEX))
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")


def cases() -> list[tuple[str, str, dict]]:
    """(label, url, headers): the pages a reviewer working the queue asks for."""
    from django.contrib.auth.models import Group

    from approvals.models import Action
    from inbox import queries

    finance = Group.objects.get(name="finance").pk
    deep = Action.objects.filter(status="pending").order_by("-created_at", "-id")[50_000]
    cursor = queries.encode_cursor(deep.created_at, deep.pk)
    first = Action.objects.filter(status="pending").order_by("-created_at", "-id").first()
    htmx = {"HX-Request": "true"}
    return [
        ("queue, first page (newest first)", "/inbox/", {}),
        ("queue, most urgent first", "/inbox/?sort=urgent", {}),
        ("queue, page 1,001 (after 50,000 rows)", f"/inbox/?after={cursor}", {}),
        (
            "queue, load more (htmx rows only)",
            f"/inbox/?after={cursor}",
            {**htmx, "HX-Target": "more"},
        ),
        ("filter: kind", "/inbox/?kind=payment.chargeback", {}),
        ("filter: agent + group", f"/inbox/?agent=mailer&group={finance}", {}),
        ("filter: amount 500.00–510.00", "/inbox/?amount_min=500&amount_max=510", {}),
        ("filter: older than 24 h", "/inbox/?age=gt24h", {}),
        ("search: title text", "/inbox/?q=order+4242", {}),
        (
            "filter change (htmx results + counts)",
            "/inbox/?kind=email.send",
            {**htmx, "HX-Target": "queue-results"},
        ),
        (
            "counts only (htmx, after a live event)",
            "/inbox/",
            {**htmx, "HX-Target": "queue-counts"},
        ),
        ("live row (?only=<id>)", f"/inbox/?only={first.pk}", htmx),
        ("action page", f"/inbox/actions/{first.pk}", {}),
        ("decided history", "/inbox/decided/", {}),
    ]


def measure(client, url: str, headers: dict, repeat: int) -> tuple[float, float, int]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    response = client.get(url, headers=headers)  # warm caches and plans
    assert response.status_code == 200, (url, response.status_code)
    timings = []
    for _ in range(repeat):
        started = time.perf_counter()
        client.get(url, headers=headers)
        timings.append((time.perf_counter() - started) * 1000)
    with CaptureQueriesContext(connection) as queries:
        client.get(url, headers=headers)
    timings.sort()
    p95 = timings[min(len(timings) - 1, int(len(timings) * 0.95))]
    return statistics.median(timings), p95, len(queries)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--actions", type=int, default=100_000)
    parser.add_argument("--decided", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument(
        "--without-newest-index",
        action="store_true",
        help="drop the (status, -created_at, -id) index first (the schema before migration 0004)",
    )
    args = parser.parse_args()
    dropped = setup_database()
    try:
        from django.conf import settings
        from django.contrib.auth.models import User
        from django.db import connection
        from django.test import Client

        settings.ALLOWED_HOSTS = ["testserver"]
        started = time.perf_counter()
        fill(args.actions, args.decided)
        if args.without_newest_index:
            drop_newest_index()
        print(
            f"filled {args.actions:,} pending + {args.decided:,} decided in {time.perf_counter() - started:.1f} s"
        )
        client = Client()
        client.force_login(User.objects.get(username="rita"))
        index = "without" if args.without_newest_index else "with"
        print(
            f"\n{connection.vendor}, {args.actions:,} pending actions, {index} the newest-first index, "
            f"{args.repeat} runs each\n"
        )
        print("| request | median ms | p95 ms | queries |")
        print("|---|---:|---:|---:|")
        for label, url, headers in cases():
            median, p95, count = measure(client, url, headers, args.repeat)
            print(f"| {label} | {median:.1f} | {p95:.1f} | {count} |")
    finally:
        if dropped:
            from django.db import connections

            connections.close_all()
            from urllib.parse import urlsplit, urlunsplit

            import psycopg

            admin = urlunsplit(urlsplit(os.environ["DATABASE_URL"])._replace(path="/postgres"))
            with psycopg.connect(admin, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{dropped}" WITH (FORCE)')


if __name__ == "__main__":
    main()
