"""Long-poll waiters benchmark (not a test): thousands of agents waiting at once, then woken.

    python bench/waiters.py                              # 2,000 REST waiters, SQLite, 1 server
    python bench/waiters.py --waiters 200 --db postgres  # PostgreSQL + Redis + worker + beat
    python bench/waiters.py --db postgres --servers 2 --mcp 100 --json waiters.json

Outside in: the script starts real ``impri serve`` processes (and, with ``--db postgres``,
``impri worker`` and ``impri beat``) on 127.0.0.1 with a fresh database (see bench/_live.py),
creates ``--waiters`` agents (one action each; in one ``impri shell -c`` run, since
``impri createagent`` costs a Django start per agent) and a reviewer, and then:

1. every agent pushes one refund (``POST /api/v1/actions``, at most ``--push-concurrency`` at
   a time) and at once long-polls ``GET /api/v1/actions/{id}/decision?timeout_s=120``; all
   waits are open together (asyncio, one connection per waiter; httpx clients of
   ``--pool-size`` connections each, because one pool of thousands costs the client
   milliseconds of CPU per request and makes it the bottleneck).
   ``--mcp M`` adds M agents that push over MCP (streamable HTTP, the official client) and
   wait in ``impri_await_decision`` with a progress token.
2. Once every wait request has been written to its socket, it lets them settle
   (``--settle`` seconds) and measures, while they wait: RSS (VmRSS) and thread count of each
   serve process, and the connections to the deployment's PostgreSQL database (from
   ``pg_stat_activity`` on a separate connection that is not counted, attributed to roles
   through /proc). The same is measured idle before the pushes, for comparison.
3. A reviewer approves every action (``POST /api/v1/actions/{id}/approve``, ``--approvers``
   concurrent requests; ``--decision-rate R`` paces them at R a second, as a team of
   reviewers decides, so that wake latency is measured below saturation). With ``--servers 2`` each approval goes to the *other* server than
   the one its agent waits on, so every wake crosses processes (Redis in scaled mode; the
   periodic re-read, ``IMPRI_AWAIT_REREAD_S``, on SQLite without Redis).
4. Each waiter records its wake latency: the client's ``time.time()`` when the decision
   arrived minus the decision's ``decision_at`` (written by the server in the approving
   transaction; same machine, same clock). ``decision_at`` is read as an ISO 8601 string or
   as Unix seconds; when the API gives only whole seconds (it does now), each action's
   ``decided_at`` is read from the database after the run (``impri shell``), to the
   microsecond; failing that the time the approve request was sent is used instead (the
   table says which). The latency from the approve request being sent is reported too.

Reported: waiters, whether all woke ``approved``, final statuses, errors by kind, RSS,
threads, PostgreSQL connections while waiting, wake p50/p90/p99/max in ms, decisions/s;
also the CPU seconds the client and each server used per phase (the client shares the
machine, so check it is not the bottleneck), the channel-layer groups in Redis (a
diagnostic) and the WARNING/ERROR lines in the servers' logs. ``--json FILE`` writes
everything, including every sample. The per-key rate limit is off in
the servers (``IMPRI_RATE_LIMIT_PER_MIN=0``): one reviewer token makes every approval.

Re-polls and where each wake came from (issue 34, docs/benchmarks.md "Wake tail under
load"): with ``--timeout-s 60`` each wait that answers ``pending`` is sent again at once, as
agents and MCP clients do; the report counts those re-polls. ``--approver-process`` sends the
approvals from a process of its own (bench/_approver.py), at the same fixed rate, so the
latency from each approve request being sent is not the waiters' client's doing.
``--probe`` loads bench/_probe/sitecustomize.py into the Impri processes: per wake, whether
the hub's receiver (a channel-layer message: ``push``) or its safety-net re-read woke it
(``read``: neither, the wait's own read found the decision), when the wake-up message was
sent, the serving loop's lag, the re-read passes and the group joins and leaves; the report
splits each wake's path into segments and adds a table by 5 s of approvals. The servers'
``impri_wakes_total{via=...}`` (``/metrics``) is read before and after the approvals.

    python bench/waiters.py --db postgres --waiters 2000 --timeout-s 60 --decision-rate 20 \
        --approver-process --probe --json run.json

The run is bounded by ``--deadline`` seconds (default 900) after the pushes start; every
process started is stopped and the database dropped at the end, on errors too.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import sys
import time
from collections import Counter
from datetime import datetime
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import _approver as approver  # noqa: E402
from bench._approver import Pace  # noqa: E402
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
from bench._wakes import attribute, loop_health, scrape_wakes, timeline  # noqa: E402

METRICS_TOKEN = "bench-metrics-token"


def refund(i: int) -> dict:
    return {
        "kind": "payment.refund",
        "title": f"Refund on order {10_000 + i}",
        "preview": {"format": "plain", "body": "x"},
        "payload": {"order_id": str(10_000 + i), "amount_cents": 8400, "currency": "USD"},
        "editable": ["payload.amount_cents"],
    }


def decision_time(value) -> tuple[float | None, bool]:
    """``decision_at`` as Unix seconds, and whether it is precise (has a fraction of a second)."""
    if value is None:
        return None, False
    if isinstance(value, bool):
        return None, False
    if isinstance(value, int | float):
        return float(value), not float(value).is_integer()
    if isinstance(value, str):
        text = value.strip()
        try:
            return float(text), "." in text
        except ValueError:
            pass
        try:
            parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            return None, False
        if parsed.tzinfo is None:
            return None, False  # a naive time: unknown zone, don't guess
        time_part = text.split("T", 1)[-1]
        return parsed.timestamp(), "." in time_part
    return None, False


class Waiter:
    __slots__ = (
        "index",
        "key",
        "server",
        "via",
        "action_id",
        "push_status",
        "sent",
        "done",
        "status",
        "arrived",
        "decision_at",
        "precise",
        "approve_sent",
        "approve_done",
        "polls",
        "error",
    )

    def __init__(self, index: int, key: str, server: int, via: str):
        self.index, self.key, self.server, self.via = index, key, server, via
        self.action_id: str | None = None
        self.push_status: int | None = None
        self.sent = False  # the first wait request is on the wire
        self.done = False
        self.status: str | None = None
        self.arrived: float | None = None
        self.decision_at: float | None = None
        self.precise = False
        self.approve_sent: float | None = None
        self.approve_done: float | None = None
        self.polls = 0
        self.error: str | None = None


def cpu_phases(marks: dict[str, dict]) -> dict:
    """CPU seconds used by the client and by all serve processes between phase marks."""
    phases = {}
    for name, start, end in (
        ("push_and_open_waits", "idle", "all_sent"),
        ("waiting", "all_sent", "settled"),
        ("approvals_and_wakes", "settled", "woken"),
    ):
        if start in marks and end in marks:
            a, b = marks[start], marks[end]
            servers = [
                (y - x) if x is not None and y is not None else None
                for x, y in zip(a["cpu_s"], b["cpu_s"], strict=True)
            ]
            phases[name] = {
                "wall_s": b["at"] - a["at"],
                "client": b["client_cpu_s"] - a["client_cpu_s"],
                "servers": servers,
            }
    return phases


class Run:
    def __init__(self, args: argparse.Namespace, stack: Stack, waiters: list[Waiter], rita: str):
        self.args = args
        self.stack = stack
        self.urls = stack.urls
        self.waiters = waiters
        self.rita = rita
        self.errors: Counter = Counter()
        self.all_sent = asyncio.Event()
        self.sent_count = 0
        self.samples: dict[str, list[dict]] = {"waiting": [], "approving": []}
        self.phase: str | None = None
        self.timings: dict[str, float] = {}
        self.approve_statuses: Counter = Counter()
        self.marks: dict[str, dict] = {}
        self.repolls_approving = 0  # waits sent again (after a `pending`) while approvals went on
        self.repoll_times: list[float] = []  # when each wait was sent again
        self.client_lags: list[tuple[float, float]] = []  # (when, seconds late) of this loop
        self.metrics_wakes: dict[str, dict | None] = {}

    def count_poll(self, w: Waiter) -> None:
        if w.polls:
            self.repoll_times.append(time.time())
            if self.phase == "approving":
                self.repolls_approving += 1
        w.polls += 1

    # --- the waiters --------------------------------------------------------------

    def mark_sent(self, waiter: Waiter) -> None:
        if not waiter.sent:
            waiter.sent = True
            self.sent_count += 1
            if self.sent_count == len(self.waiters):
                self.all_sent.set()

    def give_up(self, waiter: Waiter, error: str) -> None:
        waiter.error = error
        waiter.done = True
        self.errors[error] += 1
        self.mark_sent(waiter)  # nothing more will be sent for it

    async def rest_waiter(self, client: httpx.AsyncClient, push_gate: asyncio.Semaphore, w: Waiter):
        base = self.urls[w.server] + "/api/v1"
        headers = {"Authorization": f"Bearer {w.key}"}
        try:
            async with push_gate:
                response = await client.post(
                    base + "/actions", json=refund(w.index), headers=headers
                )
            w.push_status = response.status_code
            if response.status_code != 201:
                return self.give_up(w, f"push {response.status_code}")
            w.action_id = response.json()["action_id"]

            async def trace(event: str, info: dict) -> None:
                if event == "http11.send_request_body.complete":
                    self.mark_sent(w)

            while True:
                self.count_poll(w)
                response = await client.get(
                    f"{base}/actions/{w.action_id}/decision",
                    params={"timeout_s": self.args.timeout_s},
                    headers=headers,
                    extensions={"trace": trace},
                )
                arrived = time.time()
                self.mark_sent(w)
                if response.status_code != 200:
                    return self.give_up(w, f"decision {response.status_code}")
                if self.settled(w, arrived, response.json()):
                    return
        except Exception as exc:
            self.give_up(w, f"{type(exc).__name__}")

    @staticmethod
    def settled(w: Waiter, arrived: float, body: dict) -> bool:
        """Record a decision answer; False while it is still ``pending`` (call again)."""
        if body["status"] == "pending":
            return False
        w.arrived, w.status = arrived, body["status"]
        w.decision_at, w.precise = decision_time(body.get("decision_at"))
        w.done = True
        return True

    async def mcp_waiter(self, push_gate: asyncio.Semaphore, w: Waiter):
        import httpx2
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client

        http = httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {w.key}"},
            timeout=httpx2.Timeout(60, read=300),
        )

        async def on_progress(progress, total, message):
            pass

        try:
            async with (
                http,
                Client(
                    streamable_http_client(self.urls[w.server] + "/mcp", http_client=http),
                    mode=self.args.mcp_mode,
                ) as client,
            ):
                async with push_gate:
                    pushed = await client.call_tool("impri_push_action", refund(w.index))
                if pushed.is_error:
                    return self.give_up(w, "mcp push error")
                w.push_status = 201
                w.action_id = pushed.structured_content["action_id"]
                while True:
                    self.count_poll(w)
                    call = client.call_tool(
                        "impri_await_decision",
                        {"action_id": w.action_id, "timeout_s": self.args.timeout_s},
                        progress_callback=on_progress,
                    )
                    task = asyncio.ensure_future(call)
                    await asyncio.sleep(0)  # the SDK writes the request on its first steps
                    self.mark_sent(w)
                    result = await task
                    arrived = time.time()
                    if result.is_error:
                        return self.give_up(w, "mcp await error")
                    if self.settled(w, arrived, result.structured_content):
                        return
        except Exception as exc:
            if not w.done:
                self.give_up(w, f"mcp {type(exc).__name__}")

    # --- measuring ------------------------------------------------------------------

    async def sampler(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            if self.phase in self.samples:
                sample = await asyncio.to_thread(self.stack.sample)
                if self.phase in self.samples:
                    sample["waiting_now"] = sum(1 for w in self.waiters if not w.done)
                    self.samples[self.phase].append(sample)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.args.sample_every)

    async def client_lag(self) -> None:
        """This client's own event loop lag: a wake that arrived late because the client was
        busy (a burst of re-polls to send) is the client's, not the server's."""
        while True:
            before = time.monotonic()
            await asyncio.sleep(0.01)
            late = time.monotonic() - before - 0.01
            if late > 0.005:
                self.client_lags.append((time.time(), late))

    async def mark(self, name: str) -> dict:
        """A sample at a phase boundary (CPU time is reported between marks)."""
        self.marks[name] = sample = await asyncio.to_thread(self.stack.sample)
        return sample

    # --- the reviewer ---------------------------------------------------------------

    async def approve_all(self, client: httpx.AsyncClient) -> None:
        todo = [w for w in self.waiters if w.action_id and not w.done]
        if self.args.shuffle:
            random.Random(7).shuffle(todo)
        if self.args.approver_process:
            return await self.approve_from_process(todo)
        queue: asyncio.Queue[Waiter] = asyncio.Queue()
        for w in todo:
            queue.put_nowait(w)
        headers = {"Authorization": f"Bearer {self.rita}"}
        n = len(self.urls)

        pace = Pace(self.args.decision_rate)

        async def approver() -> None:
            while not queue.empty():
                w = queue.get_nowait()
                await pace.turn()
                # With two servers, decide on the other one: the wake crosses processes.
                url = self.urls[(w.server + 1) % n]
                w.approve_sent = time.time()
                try:
                    response = await client.post(
                        f"{url}/api/v1/actions/{w.action_id}/approve",
                        json={"note": "bench"},
                        headers=headers,
                    )
                    w.approve_done = time.time()
                    self.approve_statuses[response.status_code] += 1
                    if response.status_code != 200:
                        self.errors[f"approve {response.status_code}"] += 1
                except Exception as exc:
                    self.approve_statuses[type(exc).__name__] += 1
                    self.errors[f"approve {type(exc).__name__}"] += 1

        await asyncio.gather(*(approver() for _ in range(self.args.approvers)))

    async def approve_from_process(self, todo: list[Waiter]) -> None:
        """The same approvals, paced the same way, sent by bench/_approver.py in a process of
        its own; each approval's send time comes back from it (same clock)."""
        n = len(self.urls)
        spec = {
            "token": self.rita,
            "rate": self.args.decision_rate,
            "approvers": self.args.approvers,
            "jobs": [[self.urls[(w.server + 1) % n], w.action_id] for w in todo],
        }
        try:
            by_id = await approver.in_a_process(Path(self.stack.data_dir), spec)
        except RuntimeError as exc:
            self.errors[str(exc)] += 1
            return
        for w in todo:
            sent, done, status = by_id.get(w.action_id, (None, None, "not sent"))
            w.approve_sent, w.approve_done = sent, done
            self.approve_statuses[status] += 1
            if status != 200:
                self.errors[f"approve {status}"] += 1

    def scrape(self, name: str) -> None:
        self.metrics_wakes[name] = scrape_wakes(self.urls, METRICS_TOKEN)

    # --- the run ----------------------------------------------------------------------

    async def main(self) -> None:
        # httpx's pool does work proportional to its connections on every request, so one
        # pool holding thousands of waits makes the *client* the bottleneck: each pool holds
        # at most --pool-size connections (its waiters' own), and the reviewer has its own.
        size = self.args.pool_size

        def pool(connections: int) -> httpx.AsyncClient:
            return httpx.AsyncClient(
                limits=httpx.Limits(
                    max_connections=connections, max_keepalive_connections=connections
                ),
                timeout=httpx.Timeout(300, connect=60),
            )

        pools = [pool(size + 5) for _ in range(-(-len(self.waiters) // size))]
        client = pool(self.args.approvers + 5)
        stop_sampling = asyncio.Event()
        sampler = asyncio.create_task(self.sampler(stop_sampling))
        lag_monitor = asyncio.create_task(self.client_lag())
        push_gate = asyncio.Semaphore(self.args.push_concurrency)
        try:
            started = time.monotonic()
            tasks = [
                asyncio.create_task(
                    self.rest_waiter(pools[w.index // size], push_gate, w)
                    if w.via == "rest"
                    else self.mcp_waiter(push_gate, w)
                )
                for w in self.waiters
            ]
            await asyncio.wait_for(self.all_sent.wait(), self.args.deadline)
            self.timings["pushed_and_waiting_s"] = time.monotonic() - started
            print(
                f"all {len(self.waiters)} waits sent after "
                f"{self.timings['pushed_and_waiting_s']:.1f} s; settling {self.args.settle} s",
                flush=True,
            )
            await self.mark("all_sent")
            self.phase = "waiting"
            await asyncio.sleep(self.args.settle)
            self.samples["waiting"].append(await self.mark("settled"))
            self.samples["waiting"][-1]["waiting_now"] = sum(1 for w in self.waiters if not w.done)
            self.timings["early_returns"] = sum(1 for w in self.waiters if w.done)
            await asyncio.to_thread(self.scrape, "before_approvals")
            self.phase = "approving"
            approve_started = time.monotonic()
            await asyncio.wait_for(
                self.approve_all(client),
                max(1.0, self.args.deadline - (time.monotonic() - started)),
            )
            self.timings["approve_s"] = time.monotonic() - approve_started
            print(f"approvals sent in {self.timings['approve_s']:.1f} s", flush=True)
            remaining = max(1.0, self.args.deadline - (time.monotonic() - started))
            _, pending = await asyncio.wait(tasks, timeout=min(remaining, self.args.wake_grace))
            self.timings["all_woken_s"] = time.monotonic() - approve_started
            for task in pending:
                task.cancel()
            for w in self.waiters:
                if not w.done:
                    self.errors["not woken"] += 1
            await asyncio.gather(*pending, return_exceptions=True)
            await self.mark("woken")
            await asyncio.to_thread(self.scrape, "after_wakes")
        finally:
            self.phase = None
            stop_sampling.set()
            await sampler
            lag_monitor.cancel()
            for task in asyncio.all_tasks() - {asyncio.current_task()}:
                task.cancel()
            for each in [client, *pools]:
                await each.aclose()

    def read_decision_times(self) -> None:
        """Each decision's ``decided_at`` to the microsecond, read from the database afterwards.

        The API's timestamps are whole Unix seconds, too coarse for a latency; the row
        keeps the instant the approving transaction wrote (just before its commit).
        """
        if any(w.precise for w in self.waiters):
            return
        # Every decided action of the run's own database: a list of thousands of ids
        # would not fit in one command-line argument (the kernel caps one at 128 KiB).
        code = (
            "import json; from approvals.models import Action; "
            "print(json.dumps({a: t.timestamp() for a, t in Action.objects.filter("
            "decided_at__isnull=False).values_list('pk', 'decided_at')}))"
        )
        out = self.stack.impri("shell", "-c", code, check=False)
        try:
            times = json.loads(out.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            print(f"decision times not read: {out.stderr[-500:]}", file=sys.stderr)
            return
        for w in self.waiters:
            if w.action_id in times:
                w.decision_at, w.precise = float(times[w.action_id]), True

    # --- the report --------------------------------------------------------------------

    def report(self, idle: dict) -> dict:
        args = self.args
        woken = [w for w in self.waiters if w.arrived is not None]
        statuses = Counter(w.status or "none" for w in self.waiters)
        by_via: dict[str, dict] = {}
        for via in ("rest", "mcp"):
            group = [w for w in woken if w.via == via]
            if not group and via == "mcp":
                continue
            basis = Counter()
            wake, from_sent = [], []
            for w in group:
                if w.approve_sent is not None:
                    from_sent.append(w.arrived - w.approve_sent)
                if w.decision_at is not None and w.precise:
                    wake.append(w.arrived - w.decision_at)
                    basis["decision_at"] += 1
                elif w.approve_sent is not None:
                    wake.append(w.arrived - w.approve_sent)
                    basis["approve_sent"] += 1
            by_via[via] = {
                "waiters": sum(1 for w in self.waiters if w.via == via),
                "wake_ms": summary_ms(wake),
                "wake_basis": dict(basis),
                "from_approve_sent_ms": summary_ms(from_sent),
                "polls": sum(w.polls for w in self.waiters if w.via == via),
            }
        waiting = self.samples["waiting"]
        last = waiting[-1] if waiting else {}
        decided = self.approve_statuses.get(200, 0)
        first_sent = min((w.approve_sent for w in woken if w.approve_sent), default=0.0)
        result = {
            "benchmark": "waiters",
            "command": " ".join(sys.argv),
            "db": args.db,
            "servers": args.servers,
            "waiters": len(self.waiters),
            "rest_waiters": args.waiters,
            "mcp_waiters": args.mcp,
            "all_woken_approved": statuses == Counter({"approved": len(self.waiters)}),
            "statuses": dict(statuses),
            "errors": dict(self.errors),
            "approve_statuses": {str(k): v for k, v in self.approve_statuses.items()},
            "timings_s": self.timings,
            "decision_rate": args.decision_rate or None,
            "decisions_per_s": decided / self.timings["approve_s"]
            if self.timings.get("approve_s")
            else None,
            "idle": idle,
            "while_waiting": last,
            "while_waiting_peak": peak(waiting),
            "while_approving_peak": peak(self.samples["approving"]),
            "latency": by_via,
            # Per wake: when the approval was sent (s since the first) and the wake latency
            # (ms), to tell periodic stalls (GC, the batched re-read) from queueing.
            "wakes": sorted(
                (
                    round(w.approve_sent - first_sent, 3),
                    round((w.arrived - w.decision_at) * 1000, 2),
                    w.via,
                )
                for w in woken
                if w.approve_sent is not None and w.decision_at is not None and w.precise
            ),
            "cpu_s": cpu_phases({"idle": idle, **self.marks}),
            "pg_max_connections": self.stack.pg_max_connections(),
            "machine": machine(),
            "samples": self.samples,
        }
        result.update(self.wake_paths(woken))
        self.print_report(result)
        return result

    def wake_paths(self, woken: list[Waiter]) -> dict:
        """Re-polls, the approve requests' own time, and how each wake came (push or re-read)."""
        sent = [w.approve_sent for w in woken if w.approve_sent is not None]
        out = {
            "repolls": {
                "total": sum(max(0, w.polls - 1) for w in self.waiters),
                "after_approvals_began": self.repolls_approving,
            },
            "approve_request_ms": summary_ms(
                [
                    w.approve_done - w.approve_sent
                    for w in self.waiters
                    if w.approve_done and w.approve_sent
                ]
            ),
        }
        before, after = (
            self.metrics_wakes.get("before_approvals"),
            self.metrics_wakes.get("after_wakes"),
        )
        if before is not None and after is not None:
            out["wakes_metric"] = {k: after.get(k, 0) - before.get(k, 0) for k in after}
        events = self.stack.probe_events()
        if events and sent:
            start, end = min(sent), max(w.arrived for w in woken)
            paths = attribute(self.waiters, events)
            out["via"] = paths["by_via"]
            out["segments_ms"] = paths["segments_ms"]
            out["per_wake"] = paths["per_wake"]
            out["loop"] = loop_health(
                [e for e in events if e.get("pid") in self.server_pids()], start, end
            )
            out["timeline"] = timeline(
                paths["per_wake"], events, start, self.repoll_times, self.client_lags
            )
        return out

    def server_pids(self) -> set[int]:
        return {proc.pid for proc in self.stack.servers}

    def print_report(self, r: dict) -> None:
        idle, last = r["idle"], r["while_waiting"]
        wpeak, apeak = r["while_waiting_peak"], r["while_approving_peak"]

        def pg(sample: dict | None) -> str:
            if not sample or not sample.get("pg"):
                return "- (SQLite)"
            p = sample["pg"]
            roles = ", ".join(f"{k} {v}" for k, v in sorted(p["by_role"].items()))
            states = ", ".join(f"{k} {v}" for k, v in sorted(p["by_state"].items()))
            return f"{p['total']} ({roles}; {states})"

        def redis(sample: dict | None) -> str:
            info = (sample or {}).get("redis")
            return fmt(info["groups"]) if info else "-"

        rows = [
            ("deployment", f"{r['db']}, {r['servers']} server(s)"),
            ("waiters (REST + MCP)", f"{r['rest_waiters']:,} + {r['mcp_waiters']:,}"),
            ("all woken, approved", "yes" if r["all_woken_approved"] else "NO"),
            ("final statuses", ", ".join(f"{k} {v:,}" for k, v in r["statuses"].items())),
            ("errors", ", ".join(f"{k} {v}" for k, v in r["errors"].items()) or "none"),
            ("returned before approval", fmt(r["timings_s"].get("early_returns"))),
            ("push + open all waits", f"{fmt(r['timings_s'].get('pushed_and_waiting_s'))} s"),
            ("RSS idle (MB, all servers)", fmt(idle.get("rss_mb_total"))),
            ("RSS waiting (MB, all servers)", fmt(last.get("rss_mb_total"))),
            ("RSS peak approving (MB)", fmt(apeak.get("rss_mb_total"))),
            ("threads idle / waiting", f"{idle.get('threads')} / {last.get('threads')}"),
            ("threads peak approving", str(apeak.get("threads"))),
            ("open fds waiting", str(last.get("fds"))),
            ("PG connections idle", pg(idle)),
            ("PG connections waiting", pg(last)),
            ("PG connections peak waiting", fmt(wpeak.get("pg_total"))),
            ("PG connections peak approving", fmt(apeak.get("pg_total"))),
            ("PG max_connections", fmt(r["pg_max_connections"])),
            ("Redis groups idle / waiting", redis(idle) + " / " + redis(last)),
            ("decisions/s (paced at)", f"{fmt(r['decisions_per_s'])} ({fmt(r['decision_rate'])})"),
            ("approve phase", f"{fmt(r['timings_s'].get('approve_s'))} s"),
            ("last wake after approvals began", f"{fmt(r['timings_s'].get('all_woken_s'))} s"),
        ]
        for phase, cpu in r["cpu_s"].items():
            servers = " + ".join(fmt(x) for x in cpu["servers"])
            rows.append(
                (
                    f"CPU s {phase.replace('_', ' ')}",
                    f"client {fmt(cpu['client'])}, servers {servers} in {fmt(cpu['wall_s'])} s",
                )
            )
        for via, lat in r["latency"].items():
            wake, sent = lat["wake_ms"], lat["from_approve_sent_ms"]
            basis = ", ".join(f"{k} {v}" for k, v in lat["wake_basis"].items())
            rows += [
                (
                    f"{via} wake ms p50/p90/p99/max",
                    " / ".join(fmt(wake[k]) for k in ("p50", "p90", "p99", "max")),
                ),
                (f"{via} wake measured from", basis or "-"),
                (
                    f"{via} ms from approve sent p50/p99",
                    f"{fmt(sent['p50'])} / {fmt(sent['p99'])}",
                ),
                (f"{via} decision requests (incl. re-polls)", fmt(lat["polls"])),
            ]
        rows += self.path_rows(r)
        print_table(rows, title=f"waiters: {r['command']}")
        if r.get("timeline"):
            print(
                "\nby 5 s of approvals (time the approval was sent): wakes, via re-read / own read,"
                " re-polls sent, group joins, serve loop lag, this client's loop lag,"
                " ms from approve sent"
            )
            print(
                "| from s | wakes | reread | read | re-polls | joins | lag ms | client lag ms"
                " | p50 | p99 |"
            )
            print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
            for t in r["timeline"]:
                print(
                    f"| {t['from_s']:.0f} | {t['wakes']} | {t['reread']} | {t['read']} "
                    f"| {t['repolls']} | {t['joins']} | {t['lag_ms']} | {t['client_lag_ms']} "
                    f"| {t['p50_ms']} | {t['p99_ms']} |"
                )

    @staticmethod
    def path_rows(r: dict) -> list[tuple[str, str]]:
        def pct(lat: dict) -> str:
            return " / ".join(fmt(lat[k]) for k in ("p50", "p90", "p99", "max"))

        rows = [
            (
                "re-polls (total; after approvals began)",
                f"{fmt(r['repolls']['total'])}; {fmt(r['repolls']['after_approvals_began'])}",
            ),
            ("approve request ms p50/p90/p99/max", pct(r["approve_request_ms"])),
        ]
        if "wakes_metric" in r:
            rows.append(
                (
                    "impri_wakes_total during approvals",
                    ", ".join(f"{k} {v:,.0f}" for k, v in sorted(r["wakes_metric"].items())),
                )
            )
        for via, lat in r.get("via", {}).items():
            rows.append(
                (f"via {via}: n, ms from approve sent p50/p90/p99/max", f"{lat['n']:,}: {pct(lat)}")
            )
        for name, lat in r.get("segments_ms", {}).items():
            rows.append((f"{name} ms p50/p90/p99/max", pct(lat)))
        loop = r.get("loop")
        if loop:
            rows += [
                (
                    "serve loop lag >5 ms: events, total s, p99/max ms",
                    f"{loop['loop_lag_events_over_5ms']}, {loop['loop_lag_s_total']}, "
                    f"{loop['loop_lag_ms_p99_max'][0]} / {loop['loop_lag_ms_p99_max'][1]}",
                ),
                (
                    "re-read passes (settled found), ms p50/max",
                    f"{loop['rereads']} ({loop['reread_settled']}), {fmt(loop['reread_ms']['p50'])} / {fmt(loop['reread_ms']['max'])}",
                ),
                (
                    "group joins / leaves, ms p99",
                    f"{loop['joins']} / {loop['leaves']}, "
                    f"{fmt(loop['join_ms']['p99'])} / {fmt(loop['leave_ms']['p99'])}",
                ),
                (
                    "wake sends, ms p50/p99/max",
                    f"{loop['wake_sends']}, {pct(loop['wake_send_ms'])}",
                ),
                (
                    "worst loop lags (s into approvals, ms, lane queues)",
                    "; ".join(f"{x['at_s']} {x['lag_ms']} {x['q']}" for x in loop["worst_lags"]),
                ),
            ]
        return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--waiters", type=int, default=2000, help="REST waiters (one agent each)")
    parser.add_argument("--mcp", type=int, default=0, help="MCP waiters (one agent each)")
    parser.add_argument(
        "--mcp-mode", default="legacy", help="MCP client mode: legacy (handshake) or auto"
    )
    parser.add_argument("--timeout-s", type=float, default=120, help="timeout_s of each wait")
    parser.add_argument("--push-concurrency", type=int, default=64)
    parser.add_argument(
        "--pool-size", type=int, default=50, help="waiters per httpx client (connection pool)"
    )
    parser.add_argument("--settle", type=float, default=5, help="seconds after the last wait")
    parser.add_argument("--approvers", type=int, default=8, help="concurrent approve requests")
    parser.add_argument(
        "--decision-rate",
        type=float,
        default=0,
        help="decisions a second (paced, as reviewers decide); 0: as fast as --approvers go",
    )
    parser.add_argument("--shuffle", action="store_true", help="approve in random order")
    parser.add_argument(
        "--approver-process",
        action="store_true",
        help="send the approvals from a process of their own (bench/_approver.py)",
    )
    parser.add_argument("--sample-every", type=float, default=1.0, help="seconds between samples")
    parser.add_argument(
        "--wake-grace", type=float, default=60, help="seconds to wait for wakes after approvals"
    )
    parser.add_argument("--deadline", type=float, default=900, help="bound on the whole run")
    parser.add_argument("--json", help="write the results (and every sample) to this file")
    add_stack_arguments(parser)
    args = parser.parse_args()
    if args.waiters + args.mcp < 1:
        parser.error("nothing to wait for")
    install_sigterm()
    fd_limit = raise_fd_limit()
    if fd_limit < 2 * (args.waiters + args.mcp) + 200:
        print(f"warning: only {fd_limit} file descriptors", file=sys.stderr)

    with Stack.from_args(
        args, IMPRI_RATE_LIMIT_PER_MIN="0", IMPRI_METRICS_TOKEN=METRICS_TOKEN
    ) as stack:
        print(f"creating {args.waiters + args.mcp} agents …", flush=True)
        keys = stack.create_agents(args.waiters + args.mcp)
        rita = stack.create_reviewer()
        n = len(stack.urls)
        waiters = [
            Waiter(i, key, i % n, "rest" if i < args.waiters else "mcp")
            for i, key in enumerate(keys)
        ]
        time.sleep(1)
        idle = stack.sample()
        run = Run(args, stack, waiters, rita)
        try:
            asyncio.run(run.main())
        finally:
            if not all(stack.alive().values()):
                print(f"a process died: {stack.alive()}", file=sys.stderr)
        run.read_decision_times()
        result = run.report(idle)
        result["processes_alive_at_end"] = stack.alive()
        result["server_log_problems"] = problems = stack.log_problems()
        print_problems(problems)
    write_json(args.json, result)
    return 0 if result["all_woken_approved"] and not result["errors"] else 1


if __name__ == "__main__":
    sys.exit(main())
