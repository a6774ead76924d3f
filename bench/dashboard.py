"""Dashboard benchmark (not a test): the inbox dashboard over 10,000 decided actions.

    python bench/dashboard.py [--decided 10000] [--days 30] [--repeat 20]

Fills a fresh database (a new PostgreSQL database when DATABASE_URL is set,
else SQLite in a temporary IMPRI_DATA_DIR) with decided actions spread over the
last ``--days`` days (approved and executed refunds, rejections, expiries,
cancellations, some stale approvals), then times whole requests through
Django's test client as a finance lead: routing, middleware, session, the
query, the SVG templates. Prints a Markdown table of median and p95
milliseconds, the CPU this process spent (Django and, with SQLite, the
database: a figure a loaded machine disturbs less than wall time) and the
number of SQL queries; docs/benchmarks.md keeps the results. Target: under 300 ms for 10,000 decided actions.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.audit import drop_database, setup_database  # noqa: E402

AGENTS = ["support-bot", "billing-bot", "mailer", "crm-sync", "release-bot"]
RULES = ["small refunds", "everything else in payments", "absurd refunds", ""]


def fill(decided: int, days: int) -> None:
    from django.contrib.auth.models import Group, Permission, User
    from django.db import connection
    from django.utils import timezone

    from approvals.models import Action, Agent, new_action_id

    rng = random.Random(42)
    reviewers = Group.objects.create(name="reviewers")
    finance = Group.objects.create(name="finance")
    finance.permissions.add(Permission.objects.get(codename="view_dashboard"))
    people = [User.objects.create_user(name, password="x") for name in ("rita", "sam", "tom")]
    User.objects.create_user("fiona", password="x").groups.add(finance)
    agents = [Agent.objects.create(name=name) for name in AGENTS]
    now = timezone.now()
    outcomes = ["executed"] * 5 + ["approved", "rejected", "rejected", "expired", "cancelled"]

    def action() -> Action:
        cents = rng.randint(100, 200_000)
        payload = {"order_id": str(rng.randint(10_000, 99_999)), "amount_cents": cents}
        payload["currency"] = rng.choice(["USD", "USD", "EUR"])
        created = now - timedelta(seconds=rng.randint(0, days * 86400 - 3600))
        status = rng.choice(outcomes)
        by_person = status != "expired" and rng.random() < 0.7
        decided_at = created + timedelta(seconds=rng.randint(5, 8 * 3600))
        return Action(
            id=new_action_id(),
            agent=rng.choice(agents),
            kind=rng.choice(["payment.refund"] * 3 + ["email.send"]),
            title=f"Refund ${cents / 100:.2f} on order {payload['order_id']}",
            preview_format="markdown",
            preview_body="Customer reports a damaged item.",
            payload=payload,
            original_payload=payload,
            amount_minor=cents,  # what a push computes (approvals.money)
            amount_currency=payload["currency"],
            request_hash="0" * 64,
            created_at=created,
            expires_at=created + timedelta(days=1),
            status=status,
            review_group=reviewers,
            rule_name=rng.choice(RULES),
            decided_by_user=rng.choice(people) if by_person else None,
            decided_by_rule="" if by_person else "small refunds",
            decided_at=decided_at,
            stale_flagged_at=decided_at + timedelta(hours=1)
            if status == "approved" and rng.random() < 0.3
            else None,
        )

    for start in range(0, decided, 5000):
        Action.objects.bulk_create([action() for _ in range(min(5000, decided - start))])
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")


def measure(client, url: str, repeat: int) -> tuple[float, float, float, int]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    response = client.get(url)  # warm caches and plans
    assert response.status_code == 200, (url, response.status_code)
    timings, cpu = [], []
    for _ in range(repeat):
        started, started_cpu = time.perf_counter(), time.process_time()
        client.get(url)
        timings.append((time.perf_counter() - started) * 1000)
        cpu.append((time.process_time() - started_cpu) * 1000)
    with CaptureQueriesContext(connection) as queries:
        client.get(url)
    timings.sort()
    p95 = timings[min(len(timings) - 1, int(len(timings) * 0.95))]
    return statistics.median(timings), p95, statistics.median(cpu), len(queries)


def main() -> None:
    import os

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--decided", type=int, default=10_000)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    base_url = os.environ.get("DATABASE_URL")
    dropped = setup_database()
    try:
        from django.conf import settings
        from django.contrib.auth.models import User
        from django.db import connection
        from django.test import Client

        settings.ALLOWED_HOSTS = ["testserver"]
        started = time.perf_counter()
        fill(args.decided, args.days)
        print(f"filled {args.decided:,} decided actions in {time.perf_counter() - started:.1f} s")
        client = Client()
        client.force_login(User.objects.get(username="fiona"))
        print(
            f"\n{connection.vendor}, {args.decided:,} decided actions over {args.days} days, "
            f"{args.repeat} runs each\n"
        )
        print(f"load average before: {os.getloadavg()[0]:.1f}\n")
        print("| request | median ms | p95 ms | median CPU ms (this process) | queries |")
        print("|---|---:|---:|---:|---:|")
        for label, url in [
            (f"dashboard, last {args.days} days (the default range)", "/inbox/dashboard/"),
            ("dashboard, daily CSV", "/inbox/dashboard/?export=daily"),
            ("dashboard, refunds CSV", "/inbox/dashboard/?export=refunds"),
        ]:
            median, p95, cpu, queries = measure(client, url, args.repeat)
            print(f"| {label} | {median:.1f} | {p95:.1f} | {cpu:.1f} | {queries} |")
    finally:
        drop_database(dropped, base_url)


if __name__ == "__main__":
    main()
