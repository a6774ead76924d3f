"""Idle footprint benchmark (not a test): the memory of the scaled stack's processes at rest.

    python bench/footprint.py                                   # serve + worker + beat, idle
    python bench/footprint.py --pg-db impri_hstack --redis-dbs 7 --port 18100
    python bench/footprint.py --impri /tmp/before/impri --json before.json   # another tree

Outside in: the script starts the scaled stack the way bench/_live.py does (a fresh
PostgreSQL database and an empty Redis database number, ``impri migrate``, then
``impri serve --no-migrate``, ``impri worker`` and ``impri beat``, each a subprocess in
its own session on 127.0.0.1), waits until every process is idle, and reads from /proc:

- RSS: ``VmRSS`` of ``/proc/<pid>/status`` (every page the process maps and has in memory,
  shared libraries included, so the three processes' RSS add up to more than they cost);
- PSS: ``Pss`` of ``/proc/<pid>/smaps_rollup`` (each shared page divided among the
  processes that map it: the three PSS add up to what the stack costs the machine);
- USS: ``Private_Clean + Private_Dirty`` (what ending the process would give back);
- threads.

Each figure is for the whole process group (a Celery pool's children would count too; with
Impri's thread pool the group is one process). "Idle" means: the stack has run for
``--settle`` seconds (beat has sent its first round of timed tasks and the worker has run
them), then every process used less than ``--idle-cpu`` of a core over the last
``--window`` seconds and its RSS moved less than 1 MB; readings are taken then (at most
``--max-wait`` seconds after the start, else the last readings are reported with
"not idle"). ``--runs N`` starts the stack N times and reports each run and the median.

Only the stack's own processes are measured: not PostgreSQL, not Redis, not this client.
``--json FILE`` writes everything.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._live import (  # noqa: E402
    Stack,
    add_stack_arguments,
    fmt,
    group_pids,
    install_sigterm,
    machine,
    proc_status,
    write_json,
)

ROLES = ("serve", "worker", "beat")


def memory(pid: int) -> dict:
    """RSS (from status), PSS and USS (from smaps_rollup) of one process, in kB."""
    out = {"rss_kb": 0, "pss_kb": 0, "uss_kb": 0}
    out["rss_kb"] = proc_status(pid)["rss_kb"] or 0
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            name, _, rest = line.partition(":")
            if name == "Pss":
                out["pss_kb"] = int(rest.split()[0])
            elif name in ("Private_Clean", "Private_Dirty"):
                out["uss_kb"] += int(rest.split()[0])
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        pass
    return out


def reading(proc) -> dict:
    """One reading of a role's process group: memory summed over its processes."""
    pids = group_pids(proc.pgid) or [proc.pid]
    total = {"rss_kb": 0, "pss_kb": 0, "uss_kb": 0, "threads": 0, "cpu_s": 0.0}
    for pid in pids:
        status = proc_status(pid)
        for key, value in memory(pid).items():
            total[key] += value
        total["threads"] += status["threads"] or 0
        total["cpu_s"] += status["cpu_s"] or 0.0
    total["processes"] = len(pids)
    total["at"] = time.monotonic()
    return total


def wait_idle(stack: Stack, args: argparse.Namespace) -> tuple[dict, bool, float]:
    """Readings per role once every process is idle (or at ``--max-wait``)."""
    started = time.monotonic()
    history: dict[str, list[dict]] = {role: [] for role in ROLES}
    procs = {proc.role: proc for proc in stack.procs}
    while True:
        now = time.monotonic()
        for role in ROLES:
            if procs[role].process.poll() is not None:
                raise RuntimeError(f"impri {role} exited:\n{procs[role].tail()}")
            history[role].append(reading(procs[role]))
        elapsed = now - started
        idle = {role: is_idle(history[role], args) for role in ROLES}
        if (elapsed >= args.settle and all(idle.values())) or elapsed >= args.max_wait:
            return {role: history[role][-1] for role in ROLES}, all(idle.values()), elapsed
        time.sleep(1)


def is_idle(readings: list[dict], args: argparse.Namespace) -> bool:
    """Quiet over the last ``--window`` seconds; notes its CPU share and RSS move on the last."""
    last = readings[-1]
    window = [r for r in readings if last["at"] - r["at"] <= args.window + 0.5]
    first = window[0]
    span = last["at"] - first["at"]
    if span < args.window * 0.8:
        return False
    last["cpu_share"] = round((last["cpu_s"] - first["cpu_s"]) / span, 3)
    rss = [r["rss_kb"] for r in window]
    last["rss_moved_kb"] = max(rss) - min(rss)
    return last["cpu_share"] < args.idle_cpu and last["rss_moved_kb"] < 1024


def one_run(args: argparse.Namespace) -> dict:
    with Stack.from_args(args) as stack:
        started = time.monotonic()
        by_role, idle, waited = wait_idle(stack, args)
        log_problems = stack.log_problems()
        startup_s = time.monotonic() - started
    return {
        "by_role": by_role,
        "idle": idle,
        "waited_s": round(waited, 1),
        "startup_s": round(startup_s, 1),
        "log_problems": log_problems,
        "loadavg": Path("/proc/loadavg").read_text().split()[:3],
    }


def mb(kb: float) -> float:
    return kb / 1024


def median_run(runs: list[dict]) -> dict:
    by_role = {}
    for role in ROLES:
        by_role[role] = {
            key: statistics.median(run["by_role"][role][key] for run in runs)
            for key in ("rss_kb", "pss_kb", "uss_kb", "threads")
        }
    return {"by_role": by_role, "idle": all(run["idle"] for run in runs)}


def print_run(run: dict, title: str) -> None:
    print(f"\n{title}{'' if run['idle'] else ' (NOT idle: --max-wait reached)'}")
    print("\n| process | RSS MB | PSS MB | USS MB | threads | CPU (of a core) |")
    print("|---|---:|---:|---:|---:|---:|")
    totals = {"rss_kb": 0, "pss_kb": 0, "uss_kb": 0, "threads": 0}
    for role in ROLES:
        got = run["by_role"][role]
        for key in totals:
            totals[key] += got[key]
        print(
            f"| impri {role} | {fmt(mb(got['rss_kb']))} | {fmt(mb(got['pss_kb']))} "
            f"| {fmt(mb(got['uss_kb']))} | {fmt(int(got['threads']))} "
            f"| {fmt(got.get('cpu_share'), 3)} |"
        )
    print(
        f"| **total** | **{fmt(mb(totals['rss_kb']))}** | **{fmt(mb(totals['pss_kb']))}** "
        f"| {fmt(mb(totals['uss_kb']))} | {fmt(int(totals['threads']))} | |"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--settle", type=float, default=15, help="seconds before idleness is judged"
    )
    parser.add_argument("--window", type=float, default=5, help="seconds an idle process stays")
    parser.add_argument(
        "--idle-cpu", type=float, default=0.05, help="fraction of a core an idle process may use"
    )
    parser.add_argument("--max-wait", type=float, default=90, help="seconds; then read anyway")
    parser.add_argument("--runs", type=int, default=1, help="start the stack this many times")
    parser.add_argument("--json", help="write the results to this file")
    add_stack_arguments(parser)
    parser.set_defaults(db="postgres")
    args = parser.parse_args()
    if args.db != "postgres" or args.servers != 1:
        parser.error("the footprint is the scaled stack's: --db postgres, one serve")
    install_sigterm()

    runs = [one_run(args) for _ in range(args.runs)]
    print(f"\nfootprint: {' '.join(sys.argv)}")
    print(f"impri: {args.impri or 'python -m impri (this tree)'}")
    for i, run in enumerate(runs, 1):
        print_run(
            run,
            f"run {i}: idle after {run['waited_s']:g} s, load average {' '.join(run['loadavg'])}",
        )
        for line in run["log_problems"]["first"]:
            print(f"  log: {line}")
    if len(runs) > 1:
        print_run(median_run(runs), f"median of {len(runs)} runs")
    write_json(
        args.json,
        {
            "benchmark": "footprint",
            "command": " ".join(sys.argv),
            "impri": args.impri,
            "runs": runs,
            "machine": machine(),
        },
    )
    return 0 if all(run["idle"] for run in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
