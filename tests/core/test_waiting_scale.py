"""Waiting at scale, end to end: many agents waiting at once on real `impri serve` processes.

What the waiter hub promises (docs/ARCHITECTURE.md, "Waiting for a decision"), checked from
outside, over HTTP and MCP only:

- hundreds of REST long-polls cost a bounded number of PostgreSQL connections (the pools of
  serve, worker and beat), and a reviewer's page answers while they wait;
- tens of MCP sessions awaiting at once don't slow a REST read down;
- with Redis killed mid-wait, decisions still commit and the batched re-read wakes every
  waiter; once Redis is back, waiters are woken by push again;
- a held SQLite write stalls only its caller, not other agents' reads;
- SIGTERM answers open long-polls with ``pending`` and the process exits promptly.

Every test waits for something it can observe before it measures: a waiter's group in
Redis (the hub joined it), an MCP progress notification (the wait is in its loop), a fresh
key's ``last_used_at`` (the server authenticated that long-poll), a server thread sleeping
in SQLite's busy handler (the write is blocked on the lock).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from hashlib import sha256
from pathlib import Path

import anyio
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.factories import refund_body
from tests.live import Deployment, Server, free_port
from tests.threads import in_sleep_syscall

pytestmark = pytest.mark.e2e

HAS_PG = bool(os.environ.get("DATABASE_URL"))
HAS_PG_AND_REDIS = HAS_PG and bool(os.environ.get("REDIS_URL"))

needs_pg_and_redis = pytest.mark.skipif(
    not HAS_PG_AND_REDIS,
    reason="PostgreSQL connection counts, Celery worker and beat: the scaled leg only "
    "(DATABASE_URL and REDIS_URL)",
)
needs_pg = pytest.mark.skipif(
    not HAS_PG,
    reason="a Redis outage matters where Redis carries wake-ups between processes: the "
    "scaled leg only (DATABASE_URL)",
)
sqlite_only = pytest.mark.skipif(
    HAS_PG, reason="SQLite's file write lock is embedded mode's (the scaled leg is PostgreSQL)"
)

SQLITE_FILE = "impri.sqlite3"  # impri/settings.py: DATA_DIR / "impri.sqlite3"


# --- Deployments with what this file starts beside them --------------------------------------


class Stack:
    """A :class:`Deployment`, plus the worker, beat and Redis this file starts for it."""

    def __init__(self, **env: str):
        self.deployment = Deployment(**env)
        self.processes: list[subprocess.Popen] = []
        self.redis: list[PrivateRedis] = []

    @property
    def data_dir(self) -> Path:
        return self.deployment.data_dir

    def serve(self, **env: str) -> Server:
        return self.deployment.start_server(**env)

    def spawn(self, name: str, *args: str) -> subprocess.Popen:
        """``impri <args>`` as a subprocess in its own process group (Celery forks children)."""
        log = open(self.data_dir / f"{name}.log", "w")  # noqa: SIM115
        process = subprocess.Popen(
            [sys.executable, "-m", "impri", *args],
            env=self.deployment.env,
            cwd=self.data_dir,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.processes.append(process)
        return process

    def shell(self, code: str):
        """Run Python in the deployment (``impri shell``) and parse the JSON it printed last."""
        done = self.deployment.impri("shell", "--no-imports", "-c", code)
        return json.loads(done.stdout.strip().splitlines()[-1])

    def agent(self, name: str) -> str:
        return self.deployment.last_word("createagent", name)

    def fresh_keys(self, agent: str, count: int) -> list[str]:
        """More keys for ``agent``, never used: the first request with one is observable."""
        return self.shell(
            "import json; from identity import keys; from approvals.models import Agent; "
            f"agent = Agent.objects.get(name={agent!r}); "
            f"print(json.dumps([keys.create_agent_key(agent)[1] for _ in range({count})]))"
        )

    def reviewer(self, name: str = "rita") -> str:
        self.deployment.impri("createreviewer", name, "--password", f"{name}-password")
        return self.deployment.last_word("token", name)

    def query(self, sql: str, params: tuple = ()) -> list[tuple]:
        """Read the deployment's database from outside (``%s`` placeholders on both legs)."""
        if self.deployment.db_name:
            import psycopg

            with psycopg.connect(self.deployment.env["DATABASE_URL"], autocommit=True) as conn:
                return conn.execute(sql, params).fetchall()
        path = self.data_dir / SQLITE_FILE
        conn = sqlite3.connect(f"file:{path}?mode=rw", uri=True, timeout=5)
        try:
            return conn.execute(sql.replace("%s", "?"), params).fetchall()
        finally:
            conn.close()

    def keys_used(self, raw_keys: list[str]) -> int:
        """How many of these keys the server has authenticated a request with."""
        hashes = [sha256(raw.encode()).hexdigest() for raw in raw_keys]
        marks = ", ".join(["%s"] * len(hashes))
        rows = self.query(
            f"SELECT count(*) FROM approvals_apikey WHERE last_used_at IS NOT NULL "
            f"AND key_hash IN ({marks})",
            tuple(hashes),
        )
        return rows[0][0]

    def statuses(self, action_ids: list[str]) -> dict[str, str]:
        marks = ", ".join(["%s"] * len(action_ids))
        rows = self.query(
            f"SELECT id, status FROM approvals_action WHERE id IN ({marks})", tuple(action_ids)
        )
        return dict(rows)

    def logs(self) -> str:
        return "\n".join(
            f"--- {path.name}\n{path.read_text(errors='replace')[-3000:]}"
            for path in sorted(self.data_dir.glob("*.log"))
        )

    def close(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                with suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGTERM)
                try:
                    process.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    with suppress(ProcessLookupError):
                        os.killpg(process.pid, signal.SIGKILL)
                    process.wait()
        for redis in self.redis:
            redis.stop()
        self.deployment.close()


class PrivateRedis:
    """A redis-server of this test's own on a free loopback port (never the shared one)."""

    def __init__(self, directory: Path):
        self.port = free_port()
        self.directory = directory
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen | None = None
        self.start()

    def start(self) -> None:
        log = open(self.directory / f"redis-{self.port}.log", "a")  # noqa: SIM115
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1"]
            + ["--save", "", "--appendonly", "no", "--dir", str(self.directory)],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.directory,
        )
        deadline = time.monotonic() + 15
        while not self.answers():
            assert self.process.poll() is None, f"redis-server exited: {self.process.returncode}"
            assert time.monotonic() < deadline, "redis-server did not answer PING in 15 s"
            time.sleep(0.05)  # another process starting: nothing to await

    def client(self):
        import redis

        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=2)

    def answers(self) -> bool:
        try:
            with self.client() as client:
                return bool(client.ping())
        except Exception:
            return False

    def kill(self) -> None:
        self.process.kill()
        self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@pytest.fixture
def stacks():
    made: list[Stack] = []

    def make(**env: str) -> Stack:
        stack = Stack(**env)
        made.append(stack)
        return stack

    yield make
    for stack in made:
        stack.close()


# --- Observing another process ---------------------------------------------------------------


async def until(check, *, timeout: float, what: str, logs=lambda: "", every: float = 0.1):
    """Poll ``check`` (blocking; run in a thread) until it is truthy or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while True:
        value = await asyncio.to_thread(check)
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}\n{logs()}")
        await asyncio.sleep(every)  # another process's state: nothing here to await


def groups_joined(redis_client, action_ids: list[str], prefix: str) -> int:
    """How many of these actions' groups have a member (a hub watching it): the waiters'
    layer is channels_redis's pub/sub one, where a group is the Redis channel
    ``<IMPRI_REDIS_PREFIX>asgi__group__<group>`` and a hub watching it a subscriber."""
    channels = [f"{prefix}asgi__group__action.{action_id}" for action_id in action_ids]
    found = redis_client.pubsub_numsub(*channels) if channels else []
    return sum(1 for _, subscribers in found if subscribers)


def shared_redis():
    import redis

    return redis.Redis.from_url(os.environ["REDIS_URL"], socket_timeout=5)


def sleeping_threads(pid: int) -> set[int]:
    """Threads of ``pid`` inside a sleep syscall right now."""
    return {
        int(task.name) for task in Path(f"/proc/{pid}/task").iterdir() if in_sleep_syscall(task)
    }


class ConnectionSampler(threading.Thread):
    """Counts the deployment database's client connections, every 100 ms, until stopped."""

    SQL = (
        "SELECT count(*) FROM pg_stat_activity WHERE datname = %s "
        "AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
    )

    def __init__(self, url: str, db_name: str):
        super().__init__(daemon=True)
        self.url, self.db_name = url, db_name
        self.samples: list[int] = []
        self.halt = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        import psycopg

        try:
            with psycopg.connect(self.url, autocommit=True) as conn:
                while not self.halt.is_set():
                    self.samples.append(conn.execute(self.SQL, (self.db_name,)).fetchone()[0])
                    self.halt.wait(0.1)
        except BaseException as exc:  # reported by the test
            self.error = exc

    def stop(self) -> None:
        self.halt.set()
        self.join(timeout=10)


# --- Talking to the servers -------------------------------------------------------------------


def bearer(key: str) -> dict:
    return {"Authorization": f"Bearer {key}"}


def rest(server: Server, *, connections: int = 20, timeout: float = 30) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        base_url=server.url + "/api/v1",
        timeout=httpx.Timeout(timeout, connect=30),
        limits=httpx.Limits(max_connections=connections, max_keepalive_connections=connections),
    )


async def push_many(http: httpx.AsyncClient, keys: list[str], count: int) -> list[str]:
    """``count`` refunds, pushed over REST round-robin by ``keys``; their action ids."""
    gate = asyncio.Semaphore(20)

    async def one(i: int) -> str:
        async with gate:
            response = await http.post(
                "/actions", json=refund_body(), headers=bearer(keys[i % len(keys)])
            )
        assert response.status_code == 201, response.text
        return response.json()["action_id"]

    return list(await asyncio.gather(*(one(i) for i in range(count))))


async def decide_all(http: httpx.AsyncClient, token: str, action_ids: list[str]) -> None:
    gate = asyncio.Semaphore(20)

    async def one(action_id: str) -> None:
        async with gate:
            response = await http.post(f"/actions/{action_id}/approve", headers=bearer(token))
        assert response.status_code == 200, response.text

    await asyncio.gather(*(one(action_id) for action_id in action_ids))


@dataclass
class Answer:
    response: httpx.Response
    started: float
    returned: float

    @property
    def status(self) -> str | None:
        try:
            return self.response.json().get("status")
        except ValueError:
            return None


async def long_poll(http: httpx.AsyncClient, key: str, action_id: str, timeout_s: int) -> Answer:
    started = time.monotonic()
    response = await http.get(
        f"/actions/{action_id}/decision", params={"timeout_s": timeout_s}, headers=bearer(key)
    )
    return Answer(response, started, time.monotonic())


def summary(answers) -> dict:
    counts: dict[str, int] = {}
    for answer in answers:
        if isinstance(answer, BaseException):
            label = f"error {type(answer).__name__}"
        else:
            label = f"{answer.response.status_code} {answer.status}"
        counts[label] = counts.get(label, 0) + 1
    return counts


@asynccontextmanager
async def mcp_client(server: Server, key: str):
    http = httpx2.AsyncClient(headers=bearer(key), timeout=httpx2.Timeout(30, read=300))
    async with (
        http,
        Client(streamable_http_client(server.url + "/mcp", http_client=http), mode="legacy") as c,
    ):
        yield c


async def mcp_push(client) -> dict:
    result = await client.call_tool("impri_push_action", refund_body())
    assert not result.is_error, result.content
    return result.structured_content


# --- 1. Hundreds of REST waiters: bounded connections, a responsive reviewer ----------------

CROWD = 300
MAX_CONNECTIONS = 40


@needs_pg_and_redis
async def test_300_rest_waiters_hold_few_connections_and_all_wake_approved(stacks):
    stack = stacks(IMPRI_RATE_LIMIT_PER_MIN="0")
    server = stack.serve()
    stack.spawn("worker", "worker", "--concurrency=1")
    stack.spawn("beat", "beat")
    agent_keys = [stack.agent(f"crowd-bot-{i}") for i in range(3)]
    rita = stack.reviewer()
    redis_client = shared_redis()
    sampler = ConnectionSampler(stack.deployment.env["DATABASE_URL"], stack.deployment.db_name)

    async with (
        rest(server, connections=CROWD + 20, timeout=120) as agents,
        rest(server, connections=20) as reviewer,
    ):
        action_ids = await push_many(agents, agent_keys, CROWD)
        sampler.start()
        waiters = [
            asyncio.create_task(long_poll(agents, agent_keys[i % 3], action_id, 60))
            for i, action_id in enumerate(action_ids)
        ]
        try:
            # The hub joins an action's group when its first waiter registers: all 300 wait.
            await until(
                lambda: (
                    groups_joined(redis_client, action_ids, stack.deployment.redis_prefix) == CROWD
                ),
                timeout=90,
                what=f"all {CROWD} waits to register with the server's hub",
                logs=stack.logs,
            )
            assert not [w for w in waiters if w.done()], summary(
                w.result() for w in waiters if w.done()
            )

            page_times = []
            for _ in range(3):
                started = time.monotonic()
                page = await reviewer.get("/actions", headers=bearer(rita))
                page_times.append(time.monotonic() - started)
                assert page.status_code == 200, page.text
            assert len(page.json()["items"]) == 50
            connections_while_waiting = max(sampler.samples, default=0)
            assert not [w for w in waiters if w.done()], "a waiter returned before any decision"

            await decide_all(reviewer, rita, action_ids)
            done, pending = await asyncio.wait(waiters, timeout=90)
        finally:
            sampler.stop()
            for waiter in waiters:
                waiter.cancel()

    assert sampler.error is None, sampler.error
    assert sampler.samples, "the connection count was never sampled"
    assert max(page_times) < 1.0, (
        f"a reviewer's GET /actions took {max(page_times):.2f}s with {CROWD} agents waiting "
        f"(all reads: {[round(t, 2) for t in page_times]})"
    )
    assert connections_while_waiting <= MAX_CONNECTIONS, (
        f"serve + worker + beat held {connections_while_waiting} PostgreSQL connections "
        f"with {CROWD} agents waiting (at most {MAX_CONNECTIONS})"
    )
    assert max(sampler.samples) <= MAX_CONNECTIONS, (
        f"{max(sampler.samples)} PostgreSQL connections at some point (at most {MAX_CONNECTIONS})"
    )
    assert not pending, f"{len(pending)} waiters still open 90 s after the decisions"
    answers = [w.result() for w in waiters]
    assert all(a.response.status_code == 200 and a.status == "approved" for a in answers), summary(
        answers
    )


# --- 2. Tens of MCP sessions awaiting at once; REST reads stay prompt -----------------------

SESSIONS = 40


async def test_40_mcp_sessions_await_at_once_and_a_rest_read_stays_prompt(stacks):
    # Progress notifications every 0.5 s: the first one a session gets proves its wait is open.
    stack = stacks(IMPRI_RATE_LIMIT_PER_MIN="0", IMPRI_MCP_PROGRESS_EVERY_S="0.5")
    server = stack.serve()
    agent = stack.agent("mcp-crowd")
    rita = stack.reviewer()

    async with rest(server) as http:
        action_ids = await push_many(http, [agent], SESSIONS)
        waiting: set[int] = set()
        results: dict[int, object] = {}

        async def session(i: int) -> None:
            async def on_progress(progress, total, message):
                waiting.add(i)

            async with mcp_client(server, agent) as client:
                results[i] = await client.call_tool(
                    "impri_await_decision",
                    {"action_id": action_ids[i], "timeout_s": 60},
                    progress_callback=on_progress,
                )

        read_times: list[float] = []
        with anyio.fail_after(150):
            async with anyio.create_task_group() as tg:
                for i in range(SESSIONS):
                    tg.start_soon(session, i)
                await until(
                    lambda: len(waiting) == SESSIONS,
                    timeout=60,
                    what=f"all {SESSIONS} MCP waits to send progress "
                    f"({len(waiting)} did, {len(results)} returned)",
                    logs=stack.logs,
                )
                assert not results, "an MCP wait returned before any decision"
                for _ in range(3):
                    started = time.monotonic()
                    read = await http.get(f"/actions/{action_ids[0]}", headers=bearer(agent))
                    read_times.append(time.monotonic() - started)
                    assert read.status_code == 200, read.text
                assert not results, "an MCP wait returned before any decision"
                await decide_all(http, rita, action_ids)

    assert max(read_times) < 1.0, (
        f"GET /actions/{{id}} took {max(read_times):.2f}s with {SESSIONS} MCP sessions awaiting "
        f"(all reads: {[round(t, 2) for t in read_times]})"
    )
    assert len(results) == SESSIONS
    errors = [r.content for r in results.values() if r.is_error]
    assert not errors, errors[:3]
    statuses = [r.structured_content["status"] for r in results.values()]
    assert statuses == ["approved"] * SESSIONS, statuses


# --- 3. Redis killed mid-wait, then back -----------------------------------------------------

REREAD_S = 3.0
OUTAGE_WAITERS = 10
PUSH_WAKE_S = 1.5  # well under REREAD_S: only a push wakes a waiter this fast, reliably
DECISION_SPACING_S = 0.45  # 10 decisions spread over more than one re-read period


def json_or_none(response: httpx.Response):
    try:
        return response.json()
    except ValueError:
        return None


@needs_pg
async def test_redis_killed_mid_wait_then_back(stacks):
    stack = stacks()
    redis = PrivateRedis(stack.data_dir)
    stack.redis.append(redis)
    stack.deployment.env["REDIS_URL"] = redis.url
    stack.deployment.env["IMPRI_AWAIT_REREAD_S"] = str(REREAD_S)
    server = stack.serve()
    agent = stack.agent("outage-bot")
    rita = stack.reviewer()
    probe = redis.client()

    async with rest(server, connections=40, timeout=90) as http:
        # Phase 1: ten agents wait, Redis dies, decisions still land and wake every waiter.
        before = await push_many(http, [agent], OUTAGE_WAITERS)
        waiters = [asyncio.create_task(long_poll(http, agent, a, 60)) for a in before]
        await until(
            lambda: groups_joined(probe, before, stack.deployment.redis_prefix) == OUTAGE_WAITERS,
            timeout=30,
            what="the waits to join their groups on the private Redis",
            logs=stack.logs,
        )
        redis.kill()
        assert not redis.answers()
        assert not [w for w in waiters if w.done()], "a waiter returned before Redis was killed"

        decisions = []
        for action_id in before:
            started = time.monotonic()
            response = await http.post(f"/actions/{action_id}/approve", headers=bearer(rita))
            decisions.append((response, time.monotonic() - started))
        decided_at = time.monotonic()
        bad = [(r.status_code, r.text[:200]) for r, _ in decisions if r.status_code != 200]
        assert not bad, f"decisions with Redis down: {bad}\n{stack.logs()}"

        done, pending = await asyncio.wait(waiters, timeout=REREAD_S + 30)
        for waiter in pending:
            waiter.cancel()
        assert not pending, f"{len(pending)} waiters never saw their decision with Redis down"
        answers = [w.result() for w in waiters]
        assert all(a.response.status_code == 200 and a.status == "approved" for a in answers), (
            summary(answers)
        )
        slowest = max(a.returned for a in answers) - decided_at
        assert slowest < REREAD_S + 15, f"the last waiter woke {slowest:.1f}s after the decisions"

        pushed = await http.post("/actions", json=refund_body(), headers=bearer(agent))
        assert pushed.status_code in (201, 503), (pushed.status_code, pushed.text[:500])
        assert pushed.headers.get("content-type", "").startswith("application/json"), (
            pushed.headers.get("content-type"),
            pushed.text[:500],
        )
        assert isinstance(json_or_none(pushed), dict), pushed.text[:500]

        # Phase 2: Redis restarts (empty) on the same port; new waiters are woken by push.
        redis.start()
        after = await push_many(http, [agent], OUTAGE_WAITERS)
        waiters = [asyncio.create_task(long_poll(http, agent, a, 60)) for a in after]
        await until(
            lambda: groups_joined(probe, after, stack.deployment.redis_prefix) == OUTAGE_WAITERS,
            timeout=60,
            what="the hub to join the new waits' groups on the restarted Redis",
            logs=stack.logs,
        )
        assert not [w for w in waiters if w.done()], "a waiter returned before any decision"
        latencies = []
        started = time.monotonic()
        for i, (action_id, waiter) in enumerate(zip(after, waiters, strict=True)):
            # Decisions paced over more than one re-read period: a re-read alone would wake
            # about half of them later than PUSH_WAKE_S, whatever its phase.
            await asyncio.sleep(max(0.0, started + i * DECISION_SPACING_S - time.monotonic()))
            response = await http.post(f"/actions/{action_id}/approve", headers=bearer(rita))
            assert response.status_code == 200, response.text
            approved_at = time.monotonic()
            try:
                answer = await asyncio.wait_for(asyncio.shield(waiter), REREAD_S + 10)
            except TimeoutError:
                raise AssertionError(f"waiter {i} never woke\n{stack.logs()}") from None
            assert answer.response.status_code == 200 and answer.status == "approved", (
                answer.response.text
            )
            latencies.append(answer.returned - approved_at)

    assert max(latencies) < PUSH_WAKE_S, (
        f"after Redis came back, waiters woke {[round(t, 2) for t in latencies]}s after their "
        f"decisions: not by push (under {PUSH_WAKE_S}s) but by the {REREAD_S}s re-read"
    )


# --- 4. A held SQLite write stalls only its caller --------------------------------------------

HOLD_S = 5.0


@sqlite_only
async def test_a_held_sqlite_write_does_not_delay_other_agents_mcp_reads(stacks):
    # The embedded ticker writes too: keep it quiet, so the only blocked writer is agent A.
    stack = stacks(IMPRI_TICK_S="3600", IMPRI_SLOW_TICK_S="3600")
    server = stack.serve()
    key_a, key_b = stack.agent("writer-bot"), stack.agent("reader-bot")
    database = stack.data_dir / SQLITE_FILE
    assert database.exists(), f"no SQLite database at {database}"
    pid = server.process.pid

    async with mcp_client(server, key_a) as writer, mcp_client(server, key_b) as reader:
        await writer.list_tools()  # A's key is fresh in last_used_at: its next auth only reads
        action_b = (await mcp_push(reader))["action_id"]  # so is B's
        sleepers_before = await asyncio.to_thread(sleeping_threads, pid)

        lock = sqlite3.connect(database, isolation_level=None, timeout=0, check_same_thread=False)
        lock.execute("BEGIN IMMEDIATE")  # the write lock, held for HOLD_S
        locked_at = time.monotonic()

        async def release() -> None:
            await asyncio.sleep(HOLD_S)  # the subject: how long another writer holds the lock
            lock.execute("ROLLBACK")

        releaser = asyncio.create_task(release())
        try:
            push_a = asyncio.create_task(mcp_push(writer))
            await until(
                lambda: sleeping_threads(pid) - sleepers_before,
                timeout=HOLD_S - 1.5,
                what="agent A's push to wait on the write lock (a server thread in SQLite's "
                "busy handler)",
                logs=stack.logs,
                every=0.01,
            )
            blocked_after = time.monotonic() - locked_at
            read_times = []
            for _ in range(3):
                started = time.monotonic()
                read = await reader.call_tool("impri_get_action", {"action_id": action_b})
                read_times.append(time.monotonic() - started)
                assert not read.is_error, read.content
                assert read.structured_content["action_id"] == action_b
            push_was_blocked = not push_a.done()
            read_during_hold = time.monotonic() - locked_at < HOLD_S
            await releaser
            pushed_a = await asyncio.wait_for(push_a, 30)
        finally:
            releaser.cancel()
            with suppress(sqlite3.Error):
                lock.execute("ROLLBACK")
            lock.close()

    assert max(read_times) < 1.0, (
        f"agent B's impri_get_action took {max(read_times):.2f}s while agent A's push waited on "
        f"the SQLite write lock (all reads: {[round(t, 2) for t in read_times]})"
    )
    assert push_was_blocked and read_during_hold, (
        f"the reads did not overlap the blocked write (blocked after {blocked_after:.2f}s)"
    )
    assert pushed_a["status"] == "pending" and type(pushed_a["created_at"]) is int, pushed_a


# --- 5. SIGTERM with long-polls open ------------------------------------------------------------

DOOMED_WAITERS = 5


async def test_sigterm_answers_open_long_polls_pending_and_exits(stacks):
    stack = stacks()
    server = stack.serve()
    agent = stack.agent("sigterm-bot")
    # One fresh key per long-poll: its last_used_at shows the server authenticated that poll.
    poll_keys = stack.fresh_keys("sigterm-bot", DOOMED_WAITERS)

    async with rest(server, timeout=90) as http:
        action_ids = await push_many(http, [agent], DOOMED_WAITERS)
        waiters = [
            asyncio.create_task(long_poll(http, key, action_id, 60))
            for key, action_id in zip(poll_keys, action_ids, strict=True)
        ]
        try:
            await until(
                lambda: stack.keys_used(poll_keys) == DOOMED_WAITERS,
                timeout=30,
                what="every long-poll to reach the server",
                logs=stack.logs,
            )
            if "REDIS_URL" in stack.deployment.env:
                redis_client = shared_redis()
                await until(
                    lambda: (
                        groups_joined(redis_client, action_ids, stack.deployment.redis_prefix)
                        == DOOMED_WAITERS
                    ),
                    timeout=30,
                    what="every long-poll to register with the hub",
                    logs=stack.logs,
                )
            assert not [w for w in waiters if w.done()], "a long-poll returned before SIGTERM"

            signalled = time.monotonic()
            server.process.send_signal(signal.SIGTERM)
            try:
                returncode = await asyncio.to_thread(server.process.wait, 30)
            except subprocess.TimeoutExpired:
                raise AssertionError(
                    f"impri serve still running 30 s after SIGTERM\n{server.output()[-3000:]}"
                ) from None
            exited_in = time.monotonic() - signalled
            answers = await asyncio.wait_for(asyncio.gather(*waiters, return_exceptions=True), 30)
        finally:
            for waiter in waiters:
                waiter.cancel()

    assert exited_in < 5, f"impri serve took {exited_in:.1f}s to exit after SIGTERM"
    assert all(
        not isinstance(a, BaseException) and a.response.status_code == 200 and a.status == "pending"
        for a in answers
    ), summary(answers)
    assert returncode == 0, f"exit status {returncode}\n{server.output()[-3000:]}"
    # The answers were "call again", not decisions: every action is still pending.
    assert set(stack.statuses(action_ids).values()) == {"pending"}
