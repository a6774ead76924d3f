"""Issue 41's speed budgets, measured for one or more source trees in one run (not a test).

    .venv-test/bin/python bench/stock_parts.py --tree /work/wt-before --tree /work/main
    .venv-test/bin/python bench/stock_parts.py --tree A --tree B --write-docs --json run.json
    .venv-test/bin/python bench/stock_parts.py --tree A --tree B --quick      # smoke, ~3 min

Each ``--tree`` is a checkout with its own ``.venv-test`` (``pip install -e .`` in it, as
the working rules set up). For each tree in turn, outside in (bench/_live.py's ``Stack``):
a fresh PostgreSQL database ``impri_bench_<port>`` (the serve's port, ``--port`` + the
tree's place on the command line), Redis database ``--redis-db`` (8) flushed, and that tree's
``.venv-test/bin/impri`` runs ``migrate``, then ONE ``serve`` on ``--port`` + n, a
``worker`` and a ``beat``. Everything is then driven over HTTP (the REST API and the
decision long-poll of docs/api.md) and the public CLI (``createagent``,
``createreviewer``, ``token``, ``rules import``); nothing imports a tree's modules, so a
tree whose long-poll moved to a Channels consumer at the same URL is measured the same way.
In order:

1. **The scaled stack idle**: serve + worker + beat RSS, once every process is idle
   (bench/footprint.py's ``wait_idle``: after ``--idle-settle`` seconds, each used less
   than 5 % of a core over 5 s and its RSS moved less than 1 MB), before any API request.
2. **Create**: bench/pushes.py's pushes (rules on, a budget reserved per small refund,
   a fresh ``Idempotency-Key`` each), ``--push-seconds`` at 1 client (the p50) and then
   at 16 (creates a second), from ``--agents`` agent keys.
3. **Memory per waiting agent**: ``--waiters`` pending refunds are pushed; the serve
   process is then started again (same port and database: a process that served thousands
   of pushes has free heap that waits fill without growing), one decision is read without
   waiting (the long-poll's code loaded), and the RSS is read once it stops moving; each
   action is then awaited on a connection of its own
   (``GET /api/v1/actions/{id}/decision?timeout_s=--timeout-s``, bench/_rawhttp.py), half,
   then all, the RSS read again after each (once ``impri_waiters`` counts them, where
   /metrics has it): (all open − before) / waiters, as bench/wait_memory.py counts it.
   Step 4 and its wake-ups run on that fresh process.
4. **Approve → woken agent**: a reviewer in a process of its own (bench/_approver.py)
   approves every action at ``--decision-rate`` a second (``--approvers`` requests at a
   time), in the order the waits were opened; a wait answered ``pending`` is sent again at
   once on its connection (as agents and MCP clients do). Each wake is the waiter's
   ``time.time()`` when the decision arrived minus the approver's just before its request
   was written (same clock). Lost: an approved action whose waiter did not get
   ``approved`` within ``--wake-grace`` seconds after the last approval.

The table has a row per measure and a column per tree and the budget; ``--write-docs``
puts it in docs/benchmarks.md between ``<!-- stock-parts:begin -->`` and
``<!-- stock-parts:end -->``. A full run took 4.5–5 minutes a tree on the shared 2-core
machine at load 14–22; ``--quick`` (200 waits of 10 s, 4 s push levels) 3 minutes for two
trees at load 13–16, 4 at load 20–24.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import secrets
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import _approver as approver  # noqa: E402
from bench._live import (  # noqa: E402
    Stack,
    fmt,
    install_sigterm,
    machine,
    machine_busy_s,
    proc_status,
    raise_fd_limit,
    summary_ms,
    write_json,
)
from bench._rawhttp import RawClient  # noqa: E402
from bench._wakes import scrape_wakes  # noqa: E402
from bench.footprint import wait_idle  # noqa: E402
from bench.pushes import RULES, Pusher  # noqa: E402
from bench.wait_memory import METRICS_TOKEN, settle_rss, waiting  # noqa: E402
from bench.waiters import refund as pending_refund  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
BEGIN, END = "<!-- stock-parts:begin -->", "<!-- stock-parts:end -->"
REVIEW_GROUPS = ("reviewers", "support-leads")  # pushes.RULES routes reviewed refunds there


@dataclass(frozen=True)
class Budget:
    key: str
    label: str
    unit: str
    limit: float
    at_most: bool  # True: the value must be ≤ limit; False: ≥ limit

    def met(self, value: float | None) -> bool | None:
        if value is None:
            return None
        return value <= self.limit if self.at_most else value >= self.limit

    @property
    def text(self) -> str:
        if self.key == "lost":
            return "none"
        sign = "≤" if self.at_most else "≥"
        return f"{sign} {self.limit:g}{' ' + self.unit if self.unit else ''}"


# Issue 41, "Speed kept": PostgreSQL + Redis, one serve, two cores.
BUDGETS = (
    Budget("create_p50_ms", "create p50 at 1 client", "ms", 8, True),
    Budget("creates_per_s", "creates a second at 16 clients", "a second", 180, False),
    Budget("wake_p50_ms", "approve request → woken agent, p50", "ms", 30, True),
    Budget("wake_p99_ms", "approve request → woken agent, p99", "ms", 250, True),
    Budget("lost", "wakes lost", "", 0, True),
    Budget("kb_per_wait", "memory per waiting agent (serve RSS)", "KB", 30, True),
    Budget("idle_mb", "scaled stack idle (serve + worker + beat RSS)", "MB", 300, True),
)


# --- a tree ------------------------------------------------------------------------------


def tree_command(tree: Path) -> Path:
    impri = tree / ".venv-test" / "bin" / "impri"
    if not impri.exists():
        raise SystemExit(f"{impri} not found: give {tree} its own .venv-test (pip install -e .)")
    return impri


def tree_commit(tree: Path) -> str:
    def git(*args: str) -> str:
        out = subprocess.run(["git", "-C", str(tree), *args], capture_output=True, text=True)
        return out.stdout.strip()

    commit = git("rev-parse", "--short", "HEAD") or "?"
    return commit + (" + changes" if git("status", "--porcelain", "--untracked-files=no") else "")


def fresh_slot(args: argparse.Namespace, db_name: str, port: int) -> None:
    """Drop a database of the same name that an interrupted run left, flush the Redis
    database, and refuse a port that something already listens on."""
    import psycopg
    import redis

    with psycopg.connect(f"{args.pg_url.rstrip('/')}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{db_name}" WITH (FORCE)')
    redis.Redis.from_url(f"{args.redis.rstrip('/')}/{args.redis_db}").flushdb()
    import socket

    with socket.socket() as sock:
        if sock.connect_ex(("127.0.0.1", port)) == 0:
            raise SystemExit(f"port {port} is taken: choose another --port")


# --- the measures ------------------------------------------------------------------------


def idle_footprint(stack: Stack, args: argparse.Namespace) -> dict:
    settings = argparse.Namespace(
        settle=args.idle_settle, window=5.0, idle_cpu=0.05, max_wait=args.idle_settle + 60
    )
    by_role, idle, waited = wait_idle(stack, settings)
    rss = {role: reading["rss_kb"] / 1024 for role, reading in by_role.items()}
    return {"rss_mb": rss, "total_mb": sum(rss.values()), "idle": idle, "waited_s": waited}


def creates(stack: Stack, keys: list[str], args: argparse.Namespace) -> dict:
    settings = argparse.Namespace(
        concurrency=[1, 16],
        seconds=args.push_seconds,
        warmup=20,
        no_idempotency_key=False,
        drain_timeout=60,
        client="raw",
    )
    levels = [level.result() for level in asyncio.run(Pusher(settings, stack, keys).main())]
    one, sixteen = levels
    return {
        "p50_ms_1": one["latency_ms"]["p50"],
        "p99_ms_1": one["latency_ms"]["p99"],
        "per_s_16": sixteen["pushes_per_s"],
        "p50_ms_16": sixteen["latency_ms"]["p50"],
        "serve_cpu_ms_16": sixteen["cpu_s"]["servers"][0] * 1000 / sixteen["ok"]
        if sixteen["ok"] and sixteen["cpu_s"].get("servers", [None])[0] is not None
        else None,
        "errors": {**one["errors"], **sixteen["errors"]},
        "levels": levels,
    }


class Waiter:
    __slots__ = ("key", "action_id", "sent", "polls", "status", "arrived", "error")

    def __init__(self, key: str, action_id: str):
        self.key, self.action_id = key, action_id
        self.sent = False
        self.polls = 0
        self.status: str | None = None
        self.arrived: float | None = None
        self.error: str | None = None


class WaitRun:
    """Steps 3 and 4 of the module's docstring, on one serve process."""

    def __init__(self, stack: Stack, keys: list[str], token: str, args: argparse.Namespace):
        self.stack, self.keys, self.token, self.args = stack, keys, token, args
        self.url = stack.urls[0]
        self.pid = stack.servers[0].pid
        self.waiters: list[Waiter] = []
        self.sent = 0
        self.approving = False
        self.repolls_approving = 0
        self.lags: list[float] = []

    async def push_all(self) -> list[Waiter]:
        run, gate = secrets.token_hex(4), asyncio.Semaphore(16)

        async def push(client: RawClient, i: int) -> Waiter:
            key = self.keys[i % len(self.keys)]
            headers = {"Authorization": f"Bearer {key}", "Idempotency-Key": f"w-{run}-{i}"}
            async with gate:
                response = await client.post(
                    self.url + "/api/v1/actions", json=pending_refund(i), headers=headers
                )
            body = response.json() if response.status_code == 201 else {}
            if body.get("status") != "pending":
                raise RuntimeError(f"push {i}: {response.status_code} {response.text[:300]}")
            return Waiter(key, body["action_id"])

        async with RawClient(timeout=120) as client:  # closed: only the waits stay open
            return list(await asyncio.gather(*(push(client, i) for i in range(self.args.waiters))))

    async def wait(self, w: Waiter) -> None:
        target = (
            f"{self.url}/api/v1/actions/{w.action_id}/decision?timeout_s={self.args.timeout_s:g}"
        )
        headers = {"Authorization": f"Bearer {w.key}", "Accept": "application/json"}

        def on_sent() -> None:
            if not w.sent:
                w.sent = True
                self.sent += 1

        async with RawClient(timeout=self.args.timeout_s + 60) as client:  # its own connection
            try:
                while True:
                    w.polls += 1
                    if w.polls > 1 and self.approving:
                        self.repolls_approving += 1
                    response = await client.get(target, headers=headers, on_sent=on_sent)
                    arrived = time.time()
                    if response.status_code != 200:
                        w.error = f"decision {response.status_code}"
                        return
                    status = response.json().get("status")
                    if status != "pending":
                        w.status, w.arrived = status, arrived
                        return
            except Exception as exc:
                w.error = type(exc).__name__

    async def open_waits(self, waiters: list[Waiter], total: int) -> list[asyncio.Task]:
        """Open the waits 100 at a time (a burst of thousands of connects overflows the
        listen backlog and costs SYN retries), each batch written before the next; then
        until the server counts ``total`` waiting, where /metrics has ``impri_waiters``."""
        tasks: list[asyncio.Task] = []
        deadline = time.monotonic() + 120
        for start in range(0, len(waiters), 100):
            batch = waiters[start : start + 100]
            tasks += [asyncio.create_task(self.wait(w)) for w in batch]
            while not all(w.sent or w.error for w in batch):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"only {self.sent} of {total} waits written")
                await asyncio.sleep(0.01)
        for _ in range(100):
            counted = await asyncio.to_thread(waiting, self.url)  # -1: no such gauge
            if counted < 0 or counted >= total:
                break
            await asyncio.sleep(0.2)
        return tasks

    async def open_and_weigh(self, out: dict) -> list[asyncio.Task]:
        """Open the waits in a fresh serve process, in two halves, reading its RSS before,
        between and after.

        Fresh: a process that has served thousands of pushes has heap they left free, and
        the waits fill it without growing (20 KB a wait against 25.5 in a fresh one, on the
        same tree, docs/benchmarks.md), so the serve process is started again (same port,
        same database) after the pushes, and one read without waiting (``timeout_s=0``)
        loads the long-poll's code before the first reading."""
        fresh = await asyncio.to_thread(self.stack.restart_serve, self.stack.servers[0])
        self.pid = fresh.pid
        cold = await asyncio.to_thread(settle_rss, self.pid, 3.0, 30.0)  # before any request
        w = self.waiters[0]
        async with RawClient(timeout=60) as probe:
            first = await probe.get(
                f"{self.url}/api/v1/actions/{w.action_id}/decision?timeout_s=0",
                headers={"Authorization": f"Bearer {w.key}", "Connection": "close"},
            )
        if first.status_code != 200:
            raise RuntimeError(f"decision read: {first.status_code} {first.text[:300]}")
        half = len(self.waiters) // 2
        rss = [await asyncio.to_thread(settle_rss, self.pid, 3.0, 30.0)]
        opened, tasks = time.monotonic(), []
        for part, total in ((self.waiters[:half], half), (self.waiters[half:], len(self.waiters))):
            tasks += await self.open_waits(part, total)
            rss.append(await asyncio.to_thread(settle_rss, self.pid, 3.0, 30.0))
        out["open_s"] = time.monotonic() - opened
        out["rss_mb"] = rss  # before, half open, all open
        out["rss_cold_mb"] = cold  # before the first read (which loads the long-poll's code)
        out["rss_before_mb"], out["rss_waiting_mb"] = rss[0], rss[2]
        out["kb_per_wait"] = (rss[2] - rss[0]) * 1024 / len(self.waiters)
        out["kb_per_wait_halves"] = [
            (rss[1] - rss[0]) * 1024 / half,
            (rss[2] - rss[1]) * 1024 / (len(self.waiters) - half),
        ]
        return tasks

    async def approve_all(self) -> dict:
        """bench/_approver.py in a process of its own: {action_id: [sent, done, status]}."""
        spec = {
            "token": self.token,
            "rate": self.args.decision_rate,
            "approvers": self.args.approvers,
            "jobs": [[self.url, w.action_id] for w in self.waiters],
        }
        return await approver.in_a_process(self.stack.data_dir, spec)

    async def main(self) -> dict:
        out: dict = {"waiters": self.args.waiters}
        self.waiters = await self.push_all()
        tasks = await self.open_and_weigh(out)
        out["early"] = sum(1 for w in self.waiters if w.status or w.error)
        wakes_before = await asyncio.to_thread(scrape_wakes, [self.url], METRICS_TOKEN)
        cpu_before, busy_before = proc_status(self.pid)["cpu_s"], machine_busy_s()
        lag = asyncio.create_task(self.client_lag())
        self.approving, started = True, time.monotonic()
        approvals = await self.approve_all()
        out["approve_s"] = time.monotonic() - started
        busy_after = machine_busy_s()
        if busy_before is not None and busy_after is not None:
            share = (busy_after - busy_before) / (out["approve_s"] * (os.cpu_count() or 1))
            out["machine_busy_share"] = share  # every core, every process, while approving
        _, late = await asyncio.wait(tasks, timeout=self.args.wake_grace)
        self.approving = False
        for task in late:
            task.cancel()
        await asyncio.gather(*late, return_exceptions=True)
        lag.cancel()
        out["client_late_s"] = {"total": sum(self.lags), "max": max(self.lags, default=0.0)}
        cpu_after = proc_status(self.pid)["cpu_s"]
        wakes_after = await asyncio.to_thread(scrape_wakes, [self.url], METRICS_TOKEN)
        if wakes_before is not None and wakes_after is not None:
            out["wakes_metric"] = {
                via: wakes_after.get(via, 0) - wakes_before.get(via, 0) for via in wakes_after
            }
        if cpu_before is not None and cpu_after is not None:
            out["serve_cpu_ms_per_approval"] = (cpu_after - cpu_before) * 1000 / len(tasks)
        out.update(self.tally(approvals))
        return out

    async def client_lag(self) -> None:
        """How late this client's own loop was (> 5 ms, during the approvals and wakes): a
        wake that arrived late because the client was busy is not the server's."""
        while True:
            before = time.monotonic()
            await asyncio.sleep(0.01)
            late = time.monotonic() - before - 0.01
            if late > 0.005:
                self.lags.append(late)

    def tally(self, approvals: dict) -> dict:
        wakes, requests, approve_errors, lost = [], [], {}, 0
        for w in self.waiters:
            sent, done, status = approvals.get(w.action_id, (None, None, "not sent"))
            if status != 200:
                approve_errors[str(status)] = approve_errors.get(str(status), 0) + 1
                continue
            requests.append(done - sent)
            if w.status == "approved" and w.arrived is not None:
                wakes.append(w.arrived - sent)
            else:
                lost += 1
        errors: dict[str, int] = {}
        for w in self.waiters:
            if w.error:
                errors[w.error] = errors.get(w.error, 0) + 1
        decided = len(requests)
        return {
            "wake_ms": summary_ms(wakes),
            "approve_request_ms": summary_ms(requests),
            "lost": lost,
            "approved": decided,
            "approve_errors": approve_errors,
            "wait_errors": errors,
            "statuses": {
                s: sum(1 for w in self.waiters if w.status == s)
                for s in {w.status or "none" for w in self.waiters}
            },
            "repolls_during_approvals": self.repolls_approving,
            "repolls": sum(max(0, w.polls - 1) for w in self.waiters),
        }


def set_up(stack: Stack, agents: int) -> tuple[list[str], str]:
    """The reviewer (in the review groups, which it creates), then its token and the rules,
    while the agents are made: each a command that starts Django, seconds each here."""
    rules = stack.data_dir / "bench-rules.yaml"
    rules.write_text(RULES.format(budget_max=10**12))

    def reviewer() -> str:
        stack.impri(
            "createreviewer",
            "rita",
            f"--password={secrets.token_urlsafe(12)}",
            *(arg for group in REVIEW_GROUPS for arg in ("--group", group)),
        )
        with ThreadPoolExecutor(max_workers=1) as pool:
            imported = pool.submit(stack.impri, "rules", "import", "--create-groups", str(rules))
            token = stack.last_word("token", "rita")
            imported.result()
        return token

    with ThreadPoolExecutor(max_workers=1) as pool:
        token = pool.submit(reviewer)
        keys = stack.create_agents(agents, cli_only=True, parallel=4)
        return keys, token.result()


def measure_tree(tree: Path, n: int, args: argparse.Namespace) -> dict:
    impri = tree_command(tree)
    port = args.port + n
    # Named by its port: two sessions running this at once on other ports don't share one.
    db_name = f"impri_bench_{port}"
    fresh_slot(args, db_name, port)
    result: dict = {
        "tree": str(tree),
        "commit": tree_commit(tree),
        "started": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "load_start": os.getloadavg()[0],
    }
    began = time.monotonic()
    stack = Stack(
        "postgres",
        1,
        pg_url=args.pg_url,
        redis_url=args.redis,
        redis_dbs=str(args.redis_db),
        env={
            "IMPRI_RATE_LIMIT_PER_MIN": "0",
            "IMPRI_METRICS_TOKEN": METRICS_TOKEN,
            "IMPRI_MAX_AWAIT_S": str(max(300, int(args.timeout_s))),
        },
        keep_logs=args.keep_logs,
        impri=str(impri),
        pg_db=db_name,
        port=port,
    )
    steps: dict[str, float] = {}
    mark = time.monotonic()

    def step(name: str, what: str) -> None:
        nonlocal mark
        now = time.monotonic()
        steps[name] = round(now - mark, 1)
        mark = now
        if what:
            print(f"[{tree.name}] {what} …", flush=True)

    with stack:
        step(
            "start",
            f"the scaled stack idle, while {args.agents} agents, a reviewer and the rules are made",
        )
        # The set-up commands are processes of their own, beside the stack's (which they
        # only reach through the database): the idle readings wait for the stack's own
        # processes to be quiet, and RSS is not moved by another process's CPU.
        with ThreadPoolExecutor(max_workers=1) as pool:
            made = pool.submit(set_up, stack, args.agents)
            result["idle"] = idle_footprint(stack, args)
            step("idle", "")
            keys, token = made.result()
        step("setup", f"creates, {args.push_seconds:g} s at 1 client and at 16")
        result["create"] = creates(stack, keys, args)
        step("create", f"{args.waiters} waits, approved at {args.decision_rate:g} a second")
        result["wait"] = asyncio.run(WaitRun(stack, keys, token, args).main())
        step("wait", "")
        result["log_problems"] = stack.log_problems()
        result["alive"] = stack.alive()
    step("stop", "")
    result["steps_s"] = steps
    result["load_end"] = os.getloadavg()[0]
    result["wall_s"] = time.monotonic() - began
    result["numbers"] = numbers(result)
    return result


def numbers(result: dict) -> dict:
    wait = result["wait"]
    return {
        "create_p50_ms": result["create"]["p50_ms_1"],
        "creates_per_s": result["create"]["per_s_16"],
        "wake_p50_ms": wait["wake_ms"]["p50"],
        "wake_p99_ms": wait["wake_ms"]["p99"],
        "lost": wait["lost"] + sum(wait["approve_errors"].values()),
        "kb_per_wait": wait["kb_per_wait"],
        "idle_mb": result["idle"]["total_mb"],
    }


# --- the table -----------------------------------------------------------------------------


def cell(budget: Budget, value: float | None) -> str:
    if value is None:
        return "–"
    text = f"{value:,.0f}" if budget.key in ("lost", "creates_per_s") else f"{value:,.1f}"
    if budget.unit and budget.unit != "a second":
        text += f" {budget.unit}"
    return f"{text}, {'met' if budget.met(value) else '**missed**'}"


def context_rows(results: list[dict]) -> list[tuple[str, list[str]]]:
    def each(fn) -> list[str]:
        out = []
        for r in results:
            try:
                out.append(fn(r))
            except (KeyError, TypeError):
                out.append("–")
        return out

    def wakes_metric(r: dict) -> str:
        metric = r["wait"].get("wakes_metric")
        return ", ".join(f"{k} {v:,.0f}" for k, v in sorted(metric.items())) if metric else "–"

    rows = [
        ("tree (commit)", each(lambda r: f"`{r['tree']}` ({r['commit']})")),
        ("run failed", each(lambda r: r["error"].replace("|", "/"))),
        (
            "run at (load average at its start → end)",
            each(lambda r: f"{r['started']} ({r['load_start']:.1f} → {r['load_end']:.1f})"),
        ),
        (
            "create p99 at 1 client; p50 at 16",
            each(
                lambda r: f"{fmt(r['create']['p99_ms_1'])} ms; {fmt(r['create']['p50_ms_16'])} ms"
            ),
        ),
        (
            "waits; sent again during the approvals",
            each(lambda r: f"{r['wait']['waiters']:,}; {r['wait']['repolls_during_approvals']:,}"),
        ),
        (
            "approve → woken p90 / max",
            each(
                lambda r: (
                    f"{fmt(r['wait']['wake_ms']['p90'])} / {fmt(r['wait']['wake_ms']['max'])} ms"
                )
            ),
        ),
        (
            "the approve request itself, p50 / p99",
            each(
                lambda r: (
                    f"{fmt(r['wait']['approve_request_ms']['p50'])} / "
                    f"{fmt(r['wait']['approve_request_ms']['p99'])} ms"
                )
            ),
        ),
        (
            "machine busy while approving (all cores); this client's loop late, total / max",
            each(
                lambda r: (
                    f"{r['wait']['machine_busy_share']:.0%}; "
                    f"{r['wait']['client_late_s']['total']:.1f} / "
                    f"{r['wait']['client_late_s']['max'] * 1000:.0f} ms"
                )
            ),
        ),
        (
            "serve CPU a create at 16 clients; an approval with its wake",
            each(
                lambda r: (
                    f"{fmt(r['create']['serve_cpu_ms_16'])} ms; "
                    f"{fmt(r['wait']['serve_cpu_ms_per_approval'])} ms"
                )
            ),
        ),
        (
            "decisions a second reached",
            each(lambda r: fmt(r["wait"]["approved"] / r["wait"]["approve_s"])),
        ),
        ("wakes by `impri_wakes_total`", each(wakes_metric)),
        (
            "fresh serve RSS, before its first request; after one read → half → all the"
            " waits open; KB a wait, each half",
            each(
                lambda r: (
                    f"{fmt(r['wait'].get('rss_cold_mb'))}; "
                    + " → ".join(fmt(x) for x in r["wait"]["rss_mb"])
                    + " MB; "
                    + " / ".join(fmt(x) for x in r["wait"]["kb_per_wait_halves"])
                )
            ),
        ),
        (
            "serve / worker / beat idle RSS",
            each(
                lambda r: (
                    " / ".join(fmt(r["idle"]["rss_mb"][k]) for k in ("serve", "worker", "beat"))
                    + " MB"
                    + ("" if r["idle"]["idle"] else " (not idle)")
                )
            ),
        ),
        (
            "errors (pushes; waits; approvals; log lines)",
            each(
                lambda r: (
                    f"{sum(r['create']['errors'].values())}; "
                    f"{sum(r['wait']['wait_errors'].values())}; "
                    f"{sum(r['wait']['approve_errors'].values())}; {r['log_problems']['count']}"
                )
            ),
        ),
        ("wall time", each(lambda r: f"{r['wall_s']:.0f} s")),
    ]
    if not any("error" in r for r in results):
        rows = [row for row in rows if row[0] != "run failed"]
    return rows


def render(results: list[dict], labels: list[str]) -> str:
    lines = [
        "| measure | " + " | ".join(labels) + " | budget |",
        "|---|" + "---:|" * len(labels) + "---|",
    ]
    for budget in BUDGETS:
        cells = [cell(budget, r["numbers"].get(budget.key)) for r in results]
        lines.append(f"| {budget.label} | " + " | ".join(cells) + f" | {budget.text} |")
    for name, cells in context_rows(results):
        lines.append(f"| {name} | " + " | ".join(cells) + " | |")
    return "\n".join(lines)


def write_docs(path: Path, block: str) -> None:
    text = path.read_text()
    head, sep, rest = text.partition(BEGIN)
    _, sep2, tail = rest.partition(END)
    if not sep or not sep2:
        raise SystemExit(f"{path} has no {BEGIN} … {END} block")
    path.write_text(f"{head}{BEGIN}\n{block}\n{END}{tail}")
    print(f"\ntable written to {path}")


# --- the command line ----------------------------------------------------------------------


QUICK = {
    "waiters": 200,
    "timeout_s": 10,
    "push_seconds": 4,
    "agents": 3,
    "idle_settle": 10,
    "wake_grace": 15,
}
FULL = {
    "waiters": 2000,
    "timeout_s": 60,
    "push_seconds": 10,
    "agents": 8,
    "idle_settle": 15,
    "wake_grace": 30,
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--tree",
        action="append",
        type=Path,
        required=True,
        metavar="PATH",
        help="a checkout with its own .venv-test (repeatable; measured in order)",
    )
    parser.add_argument(
        "--label",
        action="append",
        default=[],
        metavar="NAME",
        help="the column of each --tree, in order (default: its directory name)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a smoke run: 200 waits, 10 s waits, 4 s push levels (~1.5 min a tree)",
    )
    for name, default in FULL.items():
        parser.add_argument(
            "--" + name.replace("_", "-"),
            type=type(default),
            default=None,
            help=f"default {default} ({QUICK[name]} with --quick)",
        )
    parser.add_argument("--decision-rate", type=float, default=20, help="approvals a second")
    parser.add_argument("--approvers", type=int, default=8, help="approve requests at a time")
    parser.add_argument("--port", type=int, default=18600, help="tree n's serve gets PORT + n")
    parser.add_argument("--pg-url", default="postgres://postgres@127.0.0.1:5432")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379", help="the local Redis")
    parser.add_argument("--redis-db", type=int, default=8, help="flushed before each tree")
    parser.add_argument("--keep-logs", action="store_true", help="keep each tree's data dir")
    parser.add_argument("--json", help="write every figure to this file")
    parser.add_argument(
        "--write-docs",
        nargs="?",
        const=str(ROOT / "docs" / "benchmarks.md"),
        metavar="FILE",
        help="put the table between the stock-parts markers "
        "(default file: docs/benchmarks.md of this checkout)",
    )
    args = parser.parse_args(argv)
    for name, default in (QUICK if args.quick else FULL).items():
        if getattr(args, name) is None:
            setattr(args, name, default)
    if args.label and len(args.label) != len(args.tree):
        parser.error("give one --label per --tree, or none")
    args.label = args.label or [tree.resolve().name for tree in args.tree]
    if args.waiters < 1 or args.agents < 1:
        parser.error("--waiters and --agents must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    for tree in args.tree:
        tree_command(tree)
    install_sigterm()
    raise_fd_limit()
    began = time.monotonic()
    results = []
    for n, tree in enumerate(args.tree, 1):
        try:
            results.append(measure_tree(tree.resolve(), n, args))
        except Exception as exc:  # the other trees are still measured, and this one says why
            print(f"[{tree.name}] failed: {exc!r}", file=sys.stderr)
            error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
            results.append(
                {"tree": str(tree), "commit": tree_commit(tree), "error": error, "numbers": {}}
            )
    command = "python bench/stock_parts.py " + " ".join(sys.argv[1:] if argv is None else argv)
    table = render(results, args.label)
    header = (
        f"`{command}`, {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')}, "
        f"{time.monotonic() - began:.0f} s{' (--quick)' if args.quick else ''}; "
        f"{os.cpu_count()} cores. PostgreSQL + Redis, one serve + worker + beat per tree; "
        f"{args.waiters:,} waits of {args.timeout_s:g} s from {args.agents} agent keys, "
        f"{args.decision_rate:g} approvals a second."
    )
    print(f"\n{header}\n\n{table}")
    for r in results:
        for line in r.get("log_problems", {}).get("first", []):
            print(f"  [{Path(r['tree']).name}] log: {line}")
    if args.write_docs:
        write_docs(Path(args.write_docs), f"{header}\n\n{table}")
    write_json(args.json, {"command": command, "machine": machine(), "results": results})
    return 0 if all(r["numbers"].get("lost") == 0 for r in results) else 1


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
    sys.exit(130)
