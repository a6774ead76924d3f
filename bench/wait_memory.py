"""Memory per waiting agent (not a test): how much one serve process grows per open long-poll.

For each count in ``--waits`` a fresh deployment is started (bench/_live.py's ``Stack``:
``impri migrate``, ``impri serve`` and, with ``--db postgres``, worker and beat), then:

1. agents and their pending refunds are created in one ``impri shell`` run through the
   same services the API calls (``identity.keys.create_agent``,
   ``approvals.services.push_action``): ``--per-agent`` actions per agent. Creating them
   over HTTP would take minutes at 50,000 and would measure the pushes' garbage, not the
   waits;
2. the serve process's RSS is read idle (the "idle process" the target is measured
   above), then every action is awaited by one connection of its own
   (``GET /api/v1/actions/{id}/decision?timeout_s=...`` with the agent's key, as a
   REST agent does, from ``--client-procs`` client processes of raw asyncio sockets so
   that the clients' own file limits suffice), and the RSS is read again once
   ``impri_waiters`` says they are all waiting;
3. with ``--tracemalloc`` the serve process runs under ``tracemalloc``
   (bench/_tracemalloc/sitecustomize.py) and the Python allocations that the open
   waits hold are reported by the line that made them, after a full collection;
4. every action is approved in one ``impri shell`` run (``approvals.services.decide``),
   and each connection must answer ``approved``: all woken, or the run says how many
   were not. In scaled mode the wake-ups travel through Redis; in embedded mode a shell
   process cannot reach the serve process's in-memory layer, so the safety net's re-read
   wakes them (``impri_wakes_total`` says which).

A serve process holds one file descriptor per waiting connection: the count is bounded
by the hard ``RLIMIT_NOFILE`` of the machine (``ulimit -Hn``), which the script prints.
Client process ``i`` connects from 127.0.0.``i+1`` (each source address has the loopback's
28,232 ephemeral ports): 50,000 waits need ``--client-procs 4`` or more.

    python bench/wait_memory.py --db postgres --waits 2000,10000,19000
    python bench/wait_memory.py --db sqlite --waits 2000 --tracemalloc
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._live import (  # noqa: E402
    Stack,
    add_stack_arguments,
    fmt,
    machine,
    print_table,
    proc_status,
    raise_fd_limit,
    write_json,
)

METRICS_TOKEN = "bench-metrics-token"
WAITING_LINE = re.compile(r"^impri_waiters (\S+)$", re.M)
WAKES_LINE = re.compile(r'^impri_wakes_total\{via="(\w+)"\} (\S+)$', re.M)
TRACEMALLOC_DIR = ROOT / "bench" / "_tracemalloc"

SETUP = """
import json
from identity import keys
from approvals import services
from approvals.schemas import ActionIn
n, per = {n}, {per}
out = []
for a in range((n + per - 1) // per):
    agent, raw = keys.create_agent('mem-%06d' % a)
    for i in range(a * per, min(n, (a + 1) * per)):
        action, _ = services.push_action(agent, ActionIn(
            kind='payment.refund', title='Refund on order %d' % i,
            preview={{'format': 'plain', 'body': 'x'}},
            payload={{'order_id': str(100000 + i), 'amount_cents': 8400, 'currency': 'USD'}},
            editable=['payload.amount_cents']))
        assert action.status == 'pending', action.status
        out.append((raw, action.id))
open({path!r}, 'w').write(json.dumps(out))
"""

APPROVE = """
import json
from django.contrib.auth import get_user_model
from approvals import services
rita = get_user_model().objects.get(username='rita')
for raw, action_id in json.load(open({path!r})):
    services.decide(action_id, by=rita, verdict='approve')
"""

# One client process: opens its share of the waits, says when they are all sent, then reads
# every answer and writes how many came back approved.
CLIENT = """
import asyncio, json, sys
port, timeout_s, path, out = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
source = sys.argv[5]  # a loopback address of its own: 28,232 ephemeral ports each
jobs = json.load(open(path))

async def one(raw, action_id, opened):
    reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
    writer.write((
        f"GET /api/v1/actions/{action_id}/decision?timeout_s={timeout_s} HTTP/1.1\\r\\n"
        f"Host: 127.0.0.1:{port}\\r\\nAuthorization: Bearer {raw}\\r\\n"
        "User-Agent: bench-wait-memory\\r\\nAccept: application/json\\r\\nConnection: close\\r\\n\\r\\n"
    ).encode())
    await writer.drain()
    opened.append(1)
    raw = await reader.read()  # Connection: close: the answer ends with the connection
    head, _, body = raw.partition(b"\\r\\n\\r\\n")
    if b"chunked" in head.lower():
        chunks, rest = [], body
        while rest:
            size, _, rest = rest.partition(b"\\r\\n")
            if int(size, 16) == 0:
                break
            chunks.append(rest[: int(size, 16)])
            rest = rest[int(size, 16) + 2 :]
        body = b"".join(chunks)
    writer.close()
    body = json.loads(body)
    return head.split(b" ")[1].decode(), body.get("status")

async def main():
    opened = []
    tasks = []
    for start in range(0, len(jobs), 200):
        batch = [asyncio.create_task(one(raw, a, opened)) for raw, a in jobs[start:start + 200]]
        tasks += batch
        while len(opened) < len(tasks):
            await asyncio.sleep(0.01)
    print("OPENED", len(opened), flush=True)
    results = await asyncio.gather(*tasks, return_exceptions=True)
    counts = {}
    for r in results:
        key = repr(r) if isinstance(r, BaseException) else f"{r[0]} {r[1]}"
        counts[key] = counts.get(key, 0) + 1
    json.dump(counts, open(out, "w"))

asyncio.run(main())
"""


def scrape(url: str) -> str:
    return httpx.get(
        url + "/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"}, timeout=30
    ).text


def waiting(url: str) -> int:
    found = WAITING_LINE.search(scrape(url))
    return int(float(found.group(1))) if found else -1


def wakes(url: str) -> dict[str, int]:
    return {via: int(float(v)) for via, v in WAKES_LINE.findall(scrape(url))}


def settle_rss(pid: int, seconds: float = 3.0, limit: float | None = None) -> float:
    """RSS (MB) once it has stopped moving for ``seconds`` (or, with ``limit``, the last
    reading after ``limit`` seconds, whether it has or not)."""
    last, started = None, time.monotonic()
    stable_since = started
    while True:
        rss = proc_status(pid)["rss_kb"] / 1024
        now = time.monotonic()
        if last is None or abs(rss - last) > 0.5:
            last, stable_since = rss, now
        elif now - stable_since >= seconds:
            return rss
        if limit is not None and now - started >= limit:
            return rss
        time.sleep(0.5)


def run(args: argparse.Namespace, n: int) -> dict:
    env = {"IMPRI_METRICS_TOKEN": METRICS_TOKEN, "IMPRI_MAX_AWAIT_S": str(args.timeout_s)}
    if args.tracemalloc:
        env["IMPRI_BENCH_TRACEMALLOC"] = str(args.tracemalloc_frames)
    stack = Stack.from_args(args, **env)
    if args.tracemalloc:
        stack.env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(TRACEMALLOC_DIR), stack.env.get("PYTHONPATH")) if p
        )
    result: dict = {"waits": n, "db": args.db}
    with stack:
        serve = stack.servers[0]
        url = serve.url
        stack.create_reviewer("rita")
        jobs_path = stack.data_dir / "jobs.json"
        t0 = time.monotonic()
        stack.impri("shell", "-c", SETUP.format(n=n, per=args.per_agent, path=str(jobs_path)))
        result["setup_s"] = round(time.monotonic() - t0, 1)
        jobs = json.loads(jobs_path.read_text())
        # The idle process: what it holds before any wait (and after a first request).
        waiting(url)
        result["rss_idle_mb"] = settle_rss(serve.pid)
        if args.tracemalloc:
            os.kill(serve.pid, signal.SIGUSR1)  # the first snapshot
            time.sleep(2)
        shares = [jobs[i :: args.client_procs] for i in range(args.client_procs)]
        clients = []
        script = stack.data_dir / "client.py"
        script.write_text(textwrap.dedent(CLIENT))
        t0 = time.monotonic()
        for i, share in enumerate(shares):
            path = stack.data_dir / f"client-{i}.json"
            path.write_text(json.dumps(share))
            out = stack.data_dir / f"client-{i}.out.json"
            proc = subprocess.Popen(
                [
                    sys.executable,
                    str(script),
                    url.rsplit(":", 1)[1],
                    str(args.timeout_s),
                    str(path),
                    str(out),
                    f"127.0.0.{i + 1}",
                ],
                stdout=subprocess.PIPE,
                text=True,
            )
            clients.append((proc, out))
        deadline = time.monotonic() + args.deadline
        while (now := waiting(url)) < n:
            if time.monotonic() > deadline or any(p.poll() is not None for p, _ in clients):
                raise RuntimeError(f"only {now} of {n} waits open")
            time.sleep(1)
        result["open_s"] = round(time.monotonic() - t0, 1)
        result["rss_waiting_mb"] = settle_rss(serve.pid)
        status = proc_status(serve.pid)
        result["fds_waiting"], result["threads_waiting"] = status["fds"], status["threads"]
        result["kb_per_wait"] = (result["rss_waiting_mb"] - result["rss_idle_mb"]) * 1024 / n
        if args.tracemalloc:
            report = stack.data_dir / f"tracemalloc-{serve.pid}.txt"
            os.kill(serve.pid, signal.SIGUSR1)  # the second snapshot, and the report
            for _ in range(600):
                if report.exists() and report.stat().st_size:
                    break
                time.sleep(1)
            text = report.read_text()
            result["tracemalloc"] = text
            result["tracemalloc_kb_per_wait"] = float(text.split()[1]) * 1024 / n
        before = wakes(url)
        t0 = time.monotonic()
        stack.impri("shell", "-c", APPROVE.format(path=str(jobs_path)), timeout=3600)
        answers: dict[str, int] = {}
        for proc, out in clients:
            proc.wait(timeout=args.timeout_s + 60)
            for key, count in json.loads(out.read_text()).items():
                answers[key] = answers.get(key, 0) + count
        result["wake_s"] = round(time.monotonic() - t0, 1)
        result["answers"] = answers
        result["all_woken"] = answers == {"200 approved": n}
        after = wakes(url)
        result["wakes"] = {via: after.get(via, 0) - before.get(via, 0) for via in after}
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--waits", default="2000", help="comma-separated counts, one run each")
    parser.add_argument("--per-agent", type=int, default=10, help="actions (waits) per agent")
    parser.add_argument("--client-procs", type=int, default=4)
    parser.add_argument("--timeout-s", type=int, default=600, help="each wait's timeout_s")
    parser.add_argument("--deadline", type=float, default=600, help="seconds to open the waits")
    parser.add_argument(
        "--tracemalloc",
        action="store_true",
        help="run the serve process under tracemalloc and report what the waits hold",
    )
    parser.add_argument("--tracemalloc-frames", type=int, default=1)
    parser.add_argument("--json", default=None)
    add_stack_arguments(parser)
    args = parser.parse_args()
    raise_fd_limit()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    results = [run(args, int(n)) for n in args.waits.split(",")]
    print(f"\nwait_memory: {' '.join(sys.argv)}  (RLIMIT_NOFILE {soft}/{hard})")
    print_table(
        [
            (
                f"{r['waits']:,} waits",
                f"RSS {fmt(r['rss_idle_mb'])} -> {fmt(r['rss_waiting_mb'])} MB, "
                f"{fmt(r['kb_per_wait'], 2)} KB a wait"
                + (
                    f" (tracemalloc {fmt(r['tracemalloc_kb_per_wait'], 2)} KB)"
                    if "tracemalloc_kb_per_wait" in r
                    else ""
                )
                + f", {r['threads_waiting']} threads, all woken: "
                f"{'yes' if r['all_woken'] else r['answers']}, wakes {r['wakes']}",
            )
            for r in results
        ]
    )
    for r in results:
        if "tracemalloc" in r:
            print(f"\n--- tracemalloc, {r['waits']:,} waits ---\n{r['tracemalloc']}")
    write_json(args.json, {"machine": machine(), "args": vars(args), "runs": results})


if __name__ == "__main__":
    main()
