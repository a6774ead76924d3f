"""Push throughput benchmark (not a test): REST pushes per second with rules on.

    python bench/pushes.py                                     # SQLite, 1 server, 1/16/64 clients
    python bench/pushes.py --db postgres --servers 2 --json pushes.json
    python bench/pushes.py --agents 1 --concurrency 1,16,64 --seconds 10   # one agent key

Outside in: the script starts real ``impri serve`` processes (and, with ``--db postgres``,
``impri worker`` and ``impri beat``) on 127.0.0.1 with a fresh database (see bench/_live.py),
imports a rule set with ``impri rules import`` and creates ``--agents`` agents. For each
level of ``--concurrency`` it runs that many clients (asyncio + httpx) for ``--seconds``,
each pushing refunds back to back (``POST /api/v1/actions`` with a fresh Idempotency-Key),
the agent rotating per push and the servers round-robin. No new push starts after the
time is up; pushes in flight finish and count. pushes/s = successful pushes / (time until
the last one finished).

The rule set (first match wins), so every push runs the rule engine, and the small refunds
reserve budget with the conditional UPDATE in the push's transaction:

- ``small refunds`` (≤ $50.00): ``auto_approve`` with a daily budget per agent
  (``--budget-max`` cents, large by default so it does not run out during the run);
- ``absurd refunds`` (> $10,000.00): ``auto_reject`` with a reason;
- ``payments review``: everything else in ``payment.*`` goes to ``support-leads``.

Amounts cycle 6 small : 3 reviewed : 1 absurd. Reported per level: pushes, pushes/s,
latency p50/p90/p99/max, status codes and errors, the outcome mix (approved / pending /
rejected), the peak serve-process RSS, threads and PostgreSQL connections, and the CPU
seconds the client, each server and the whole machine (every core, every process:
PostgreSQL, Redis, worker and beat included) used during the level (the client shares the
machine).
At the end ``impri audit verify`` must say ``ok`` and the number of actions in the database
must equal the number of successful pushes. The per-key rate limit is off in the servers
(``IMPRI_RATE_LIMIT_PER_MIN=0``). ``--json FILE`` writes everything.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import secrets
import sys
import time
from collections import Counter
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._live import (  # noqa: E402
    Stack,
    add_stack_arguments,
    fmt,
    install_sigterm,
    machine,
    peak,
    print_problems,
    print_table,
    raise_fd_limit,
    summary_ms,
    write_json,
)
from bench._rawhttp import RawClient  # noqa: E402

RULES = """\
rules:
  - name: small refunds
    kind: payment.refund
    when: {{path: payload.amount_cents, lte: 5000}}
    then: auto_approve
    budget: {{per: day, sum: payload.amount_cents, max: {budget_max}}}
  - name: absurd refunds
    kind: payment.refund
    when: {{path: payload.amount_cents, gt: 1000000}}
    then: auto_reject
    reason: above the hard cap for agent refunds
  - name: payments review
    kind: payment.*
    then: review
    group: support-leads
    edit_bounds: {{payload.amount_cents: {{min: 1, max: original}}}}
"""

# 6 auto-approved : 3 reviewed : 1 auto-rejected
AMOUNTS = [1200, 8400, 2500, 4999, 25000, 800, 2000_000, 3100, 150_000, 4000]


def refund(n: int) -> dict:
    amount = AMOUNTS[n % len(AMOUNTS)]
    order = str(100_000 + n)
    return {
        "kind": "payment.refund",
        "title": f"Refund ${amount / 100:.2f} on order {order}",
        "preview": {"format": "markdown", "body": f"Customer reports a damaged item. **{order}**"},
        "payload": {"order_id": order, "amount_cents": amount, "currency": "USD"},
        "target_url": f"https://shop.example.com/admin/orders/{order}",
        "editable": ["payload.amount_cents"],
        "context": {"customer_message": "It arrived broken."},
    }


class Level:
    def __init__(self, concurrency: int):
        self.concurrency = concurrency
        self.latencies: list[float] = []
        self.statuses: Counter = Counter()
        self.outcomes: Counter = Counter()
        self.errors: Counter = Counter()
        self.elapsed = 0.0
        self.samples: list[dict] = []
        self.cpu: dict = {}

    @property
    def ok(self) -> int:
        return self.statuses.get(201, 0) + self.statuses.get(200, 0)

    def result(self) -> dict:
        return {
            "concurrency": self.concurrency,
            "pushes": sum(self.statuses.values()),
            "ok": self.ok,
            "elapsed_s": self.elapsed,
            "pushes_per_s": self.ok / self.elapsed if self.elapsed else None,
            "latency_ms": summary_ms(self.latencies),
            "statuses": {str(k): v for k, v in self.statuses.items()},
            "errors": dict(self.errors),
            "outcomes": dict(self.outcomes),
            "peak": peak(self.samples),
            "cpu_s": self.cpu,
        }


class Pusher:
    def __init__(self, args: argparse.Namespace, stack: Stack, keys: list[str]):
        self.args = args
        self.stack = stack
        self.keys = keys
        self.urls = stack.urls
        self.counter = itertools.count()
        self.run_id = secrets.token_hex(4)

    async def push(self, client, level: Level | None) -> None:
        n = next(self.counter)
        url = self.urls[n % len(self.urls)] + "/api/v1/actions"
        headers = {"Authorization": f"Bearer {self.keys[n % len(self.keys)]}"}
        if not self.args.no_idempotency_key:
            headers["Idempotency-Key"] = f"bench-{self.run_id}-{n}"
        started = time.perf_counter()
        try:
            response = await client.post(url, json=refund(n), headers=headers)
        except Exception as exc:
            if level is not None:
                level.errors[type(exc).__name__] += 1
                level.statuses[type(exc).__name__] += 1
            return
        took = time.perf_counter() - started
        if level is None:
            if response.status_code != 201:
                raise RuntimeError(f"warm-up push failed: {response.status_code} {response.text}")
            return
        level.statuses[response.status_code] += 1
        if response.status_code in (200, 201):
            level.latencies.append(took)
            level.outcomes[response.json().get("status")] += 1
        else:
            level.errors[f"{response.status_code} {response.text[:120]}"] += 1

    async def sampler(self, level: Level, stop: asyncio.Event) -> None:
        while not stop.is_set():
            level.samples.append(await asyncio.to_thread(self.stack.sample))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 1.0)

    async def run_level(self, client, concurrency: int) -> Level:
        level = Level(concurrency)
        stop_at = time.monotonic() + self.args.seconds

        async def worker() -> None:
            while time.monotonic() < stop_at:
                await self.push(client, level)

        stop = asyncio.Event()
        first = await asyncio.to_thread(self.stack.sample)
        sampler = asyncio.create_task(self.sampler(level, stop))
        started = time.monotonic()
        try:
            await asyncio.wait_for(
                asyncio.gather(*(worker() for _ in range(concurrency))),
                self.args.seconds + self.args.drain_timeout,
            )
        finally:
            level.elapsed = time.monotonic() - started
            stop.set()
            await sampler
            last = await asyncio.to_thread(self.stack.sample)
            busy = (last.get("machine_busy_s"), first.get("machine_busy_s"))
            level.cpu = {
                "client": last["client_cpu_s"] - first["client_cpu_s"],
                "machine": busy[0] - busy[1] if None not in busy else None,
                "servers": [
                    b - a if a is not None and b is not None else None
                    for a, b in zip(first["cpu_s"], last["cpu_s"], strict=True)
                ],
            }
        return level

    async def main(self) -> list[Level]:
        top = max(self.args.concurrency) + 10
        if self.args.client == "raw":
            client = RawClient(timeout=120)
        else:
            client = httpx.AsyncClient(
                limits=httpx.Limits(max_connections=top, max_keepalive_connections=top),
                timeout=httpx.Timeout(120, connect=30),
            )
        async with client:
            for _ in range(self.args.warmup):
                await self.push(client, None)
            levels = []
            for concurrency in self.args.concurrency:
                level = await self.run_level(client, concurrency)
                print(
                    f"concurrency {concurrency}: {level.ok:,} pushes in {level.elapsed:.1f} s",
                    flush=True,
                )
                levels.append(level)
            return levels


def count_actions(stack: Stack) -> int | None:
    code = "from approvals.models import Action\nprint('BENCHCOUNT', Action.objects.count())\n"
    out = stack.impri("shell", "-c", code, check=False).stdout
    for line in out.splitlines():
        if line.startswith("BENCHCOUNT "):
            return int(line.split()[1])
    return None


def print_report(result: dict) -> None:
    print(f"\npushes: {result['command']}")
    print(
        f"{result['db']}, {result['servers']} server(s), {result['agents']} agent(s), "
        f"{result['seconds']:g} s per level, rules on, {result['client']} client"
    )
    print(
        "\n| clients | pushes | pushes/s | p50 ms | p90 ms | p99 ms | max ms "
        "| approved / pending / rejected | errors | RSS MB | threads | PG conns "
        "| CPU s client / servers / whole machine |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---|---|---:|---|---:|---|")
    for level in result["levels"]:
        lat, out, pk = level["latency_ms"], level["outcomes"], level["peak"]
        mix = " / ".join(f"{out.get(k, 0):,}" for k in ("approved", "pending", "rejected"))
        errors = ", ".join(f"{k}: {v}" for k, v in level["errors"].items()) or "0"
        cpu = level["cpu_s"]
        cpu = (
            f"{fmt(cpu.get('client'))} / "
            + " + ".join(fmt(x) for x in cpu.get("servers", []))
            + f" / {fmt(cpu.get('machine'))}"
        )
        print(
            f"| {level['concurrency']} | {level['ok']:,} | {fmt(level['pushes_per_s'])} "
            f"| {fmt(lat['p50'])} | {fmt(lat['p90'])} | {fmt(lat['p99'])} | {fmt(lat['max'])} "
            f"| {mix} | {errors} | {fmt(pk.get('rss_mb_total'))} | {pk.get('threads')} "
            f"| {fmt(pk.get('pg_total'))} | {cpu} |"
        )
    verify = result["audit_verify"]
    print_table(
        [
            ("impri audit verify", f"{verify['output']} (exit {verify['returncode']})"),
            ("actions in the database", fmt(result["actions_in_db"])),
            ("successful pushes (incl. warm-up)", fmt(result["ok_pushes_total"])),
            ("all counted", "yes" if result["actions_match"] else "NO"),
        ]
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--concurrency",
        type=lambda text: [int(part) for part in text.split(",") if part.strip()],
        default=[1, 16, 64],
        help="comma-separated client counts (default 1,16,64)",
    )
    parser.add_argument("--seconds", type=float, default=10, help="per level")
    parser.add_argument("--agents", type=int, default=64, help="distinct agent keys (1 = one)")
    parser.add_argument("--warmup", type=int, default=20, help="untimed pushes first")
    parser.add_argument("--budget-max", type=int, default=10**12, help="cents per agent per day")
    parser.add_argument("--no-idempotency-key", action="store_true")
    parser.add_argument(
        "--drain-timeout", type=float, default=120, help="bound on in-flight pushes after a level"
    )
    parser.add_argument(
        "--client",
        choices=["raw", "httpx"],
        default="raw",
        help="raw: bench/_rawhttp.py, lean, so the client takes less of the server's CPU "
        "(default); httpx: the full client, as before",
    )
    parser.add_argument("--json", help="write the results (and every sample) to this file")
    add_stack_arguments(parser)
    args = parser.parse_args()
    install_sigterm()
    raise_fd_limit()

    with Stack.from_args(args, IMPRI_RATE_LIMIT_PER_MIN="0") as stack:
        rules = stack.data_dir / "bench-rules.yaml"
        rules.write_text(RULES.format(budget_max=args.budget_max))
        imported = stack.impri("rules", "import", "--create-groups", str(rules)).stdout.strip()
        keys = stack.create_agents(args.agents)
        pusher = Pusher(args, stack, keys)
        levels = asyncio.run(pusher.main())
        verify = stack.impri("audit", "verify", check=False)
        actions = count_actions(stack)
        ok_total = sum(level.ok for level in levels) + args.warmup
        result = {
            "benchmark": "pushes",
            "command": " ".join(sys.argv),
            "db": args.db,
            "servers": args.servers,
            "agents": args.agents,
            "seconds": args.seconds,
            "client": args.client,
            "rules_import": imported,
            "levels": [level.result() for level in levels],
            "audit_verify": {
                "returncode": verify.returncode,
                "output": (verify.stdout + verify.stderr).strip(),
                "ok": verify.returncode == 0 and verify.stdout.startswith("ok"),
            },
            "actions_in_db": actions,
            "ok_pushes_total": ok_total,
            "actions_match": actions == ok_total,
            "pg_max_connections": stack.pg_max_connections(),
            "processes_alive_at_end": stack.alive(),
            "server_log_problems": stack.log_problems(),
            "machine": machine(),
            "samples": {str(level.concurrency): level.samples for level in levels},
        }
    print_report(result)
    print_problems(result["server_log_problems"])
    write_json(args.json, result)
    errors = sum(len(level["errors"]) for level in result["levels"])
    return 0 if result["audit_verify"]["ok"] and result["actions_match"] and not errors else 1


if __name__ == "__main__":
    sys.exit(main())
