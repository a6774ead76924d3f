"""Audit-chain benchmarks (not tests): append throughput by writers, and verify time.

    python bench/audit.py append [--seconds 10] [--writers 1 8 32]
    python bench/audit.py verify [--events 1000000]

Runs against a fresh database: a new PostgreSQL database when DATABASE_URL is
set (the server in it is reused, the database is created and dropped), else
a SQLite file in a temporary IMPRI_DATA_DIR.
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def setup_database() -> str | None:
    """Point Django at a fresh database; return the PostgreSQL name to drop afterwards."""
    os.environ.setdefault("IMPRI_DATA_DIR", tempfile.mkdtemp(prefix="impri-bench-"))
    os.environ.setdefault("SECRET_KEY", "bench")
    url = os.environ.get("DATABASE_URL")
    name = None
    if url:
        import psycopg

        name = "impri_bench_" + secrets.token_hex(4)
        admin = urlunsplit(urlsplit(url)._replace(path="/postgres"))
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        os.environ["DATABASE_URL"] = urlunsplit(urlsplit(url)._replace(path="/" + name))
    os.environ["DJANGO_SETTINGS_MODULE"] = "impri.settings"
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    return name


def drop_database(name: str | None, base_url: str | None) -> None:
    if not name:
        return
    from django.db import connections

    connections.close_all()
    import psycopg

    admin = urlunsplit(urlsplit(base_url)._replace(path="/postgres"))
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def bench_append(seconds: float, writer_counts: list[int]) -> None:
    from django.db import connection, transaction

    from audit import log
    from audit.models import AuditEvent

    print(f"backend: {connection.vendor}; {seconds:.0f} s per run")
    for writers in writer_counts:
        before = AuditEvent.objects.count()
        stop = time.monotonic() + seconds
        barrier = threading.Barrier(writers)

        def append(worker: int, barrier=barrier, stop=stop) -> None:
            barrier.wait()
            i = 0
            while time.monotonic() < stop:
                with transaction.atomic():
                    log.record(
                        "bench.append", actor_type="system", actor_id=f"w{worker}", data={"i": i}
                    )
                i += 1
            connection.close()

        threads = [threading.Thread(target=append, args=(w,)) for w in range(writers)]
        started = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.monotonic() - started
        appended = AuditEvent.objects.count() - before
        result = log.verify()
        prevs = AuditEvent.objects.values("prev_hash").distinct().count()
        print(
            f"writers={writers:>2}  appends={appended:>7}  {appended / elapsed:8.0f}/s  "
            f"verify={'ok' if result.ok else 'BROKEN'}  forks={AuditEvent.objects.count() - prevs}"
        )


def bench_verify(count: int) -> None:
    from django.db import connection, transaction
    from django.utils import timezone

    from audit import log
    from audit.models import CURRENT_SCHEME, GENESIS_HASH, AuditEvent, ChainHead

    print(f"backend: {connection.vendor}; building a chain of {count:,} events …")
    started = time.monotonic()
    prev, batch, seq = GENESIS_HASH, [], 0
    now = timezone.now()
    with transaction.atomic():
        for seq in range(1, count + 1):
            event = AuditEvent(
                seq=seq,
                scheme=CURRENT_SCHEME,
                at=now,
                actor_type="system",
                actor_id="bench",
                action_id="",
                event="bench.event",
                data={"i": seq, "amount_cents": seq % 10000},
                prev_hash=prev,
            )
            event.hash = event.compute_hash()
            prev = event.hash
            batch.append(event)
            if len(batch) == 5000:
                AuditEvent.objects.bulk_create(batch)
                batch = []
        AuditEvent.objects.bulk_create(batch)
        ChainHead.objects.update_or_create(pk=1, defaults={"seq": seq, "hash": prev})
    print(f"built in {time.monotonic() - started:.1f} s")
    started = time.monotonic()
    result = log.verify()
    elapsed = time.monotonic() - started
    print(
        f"verify: {'ok' if result.ok else 'BROKEN'} {result.checked:,} events in {elapsed:.1f} s "
        f"({result.checked / elapsed:,.0f} events/s)"
    )
    # Routine verification: the first starts at the genesis and leaves a signed
    # run; the next reads only what was appended after it.
    started = time.monotonic()
    first = log.verify_routine(by="bench")
    elapsed = time.monotonic() - started
    print(f"routine verify (no run yet): {first.checked:,} events in {elapsed:.1f} s")
    with transaction.atomic():
        for i in range(100):
            log.record("bench.event", actor_type="system", actor_id="bench", data={"i": i})
    started = time.monotonic()
    second = log.verify_routine(by="bench")
    elapsed = time.monotonic() - started
    print(f"routine verify after 100 appends: {second.checked:,} events in {elapsed * 1000:.0f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="what", required=True)
    append = sub.add_parser("append")
    append.add_argument("--seconds", type=float, default=10)
    append.add_argument("--writers", type=int, nargs="+", default=[1, 8, 32])
    verify = sub.add_parser("verify")
    verify.add_argument("--events", type=int, default=1_000_000)
    args = parser.parse_args()
    base_url = os.environ.get("DATABASE_URL")
    name = setup_database()
    try:
        if args.what == "append":
            bench_append(args.seconds, args.writers)
        else:
            bench_verify(args.events)
    finally:
        drop_database(name, base_url)


if __name__ == "__main__":
    main()
