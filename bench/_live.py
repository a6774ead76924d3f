"""Shared helpers for the outside-in benchmarks (bench/waiters.py, bench/pushes.py).

A :class:`Stack` is one Impri deployment started the way production starts it, as
subprocesses of this script, on loopback only:

- ``--db sqlite``: a fresh ``IMPRI_DATA_DIR`` (SQLite, in-memory channel layer);
  ``impri migrate``, then ``impri serve --no-migrate`` ×N (each runs its embedded ticker).
- ``--db postgres``: scaled mode. A fresh database on the local PostgreSQL
  (``DATABASE_URL``) and an empty Redis database number (``REDIS_URL``: channel layer,
  cache, Celery broker); ``impri migrate`` once, ``impri serve --no-migrate`` ×N,
  ``impri worker`` and ``impri beat``.

Every process gets its own session (process group), and :meth:`Stack.close` ends each
group it started (SIGTERM, then SIGKILL), drops the database (``WITH (FORCE)``), flushes
the Redis database it picked and removes the data dir. Use it as a context manager so
that this happens on errors and Ctrl-C too (SIGTERM to the benchmark is turned into
KeyboardInterrupt by :func:`install_sigterm`).

This module only talks to the deployment from outside (HTTP, the ``impri`` CLI,
``/proc`` and ``pg_stat_activity``); nothing here imports Django.
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import json
import math
import os
import resource
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import httpx

ROOT = Path(__file__).resolve().parent.parent
LOOPBACK_NAMES = {"127.0.0.1", "localhost", "::1"}


# --- command line -------------------------------------------------------------------------


def add_stack_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("deployment")
    group.add_argument(
        "--db",
        choices=["sqlite", "postgres"],
        default="sqlite",
        help="sqlite: embedded mode; postgres: scaled mode (PostgreSQL + Redis + worker + beat)",
    )
    group.add_argument(
        "--servers", type=int, choices=[1, 2], default=1, help="impri serve processes"
    )
    group.add_argument(
        "--pg-url",
        default="postgres://postgres@127.0.0.1:5432",
        help="the local PostgreSQL server; a fresh database is created on it and dropped",
    )
    group.add_argument(
        "--redis",
        default="redis://127.0.0.1:6379",
        help="the local Redis; the first empty database number from --redis-dbs is used",
    )
    group.add_argument("--redis-dbs", default="10-15", help="database numbers to pick from")
    group.add_argument(
        "--pg-db",
        default=None,
        help="name of the database to create (and drop) for the run; default: a random one",
    )
    group.add_argument(
        "--port",
        type=int,
        default=0,
        help="first port of the serve processes (the next ones follow); default: any free one",
    )
    group.add_argument(
        "--server-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="extra environment for every Impri process (repeatable), e.g. IMPRI_RATE_LIMIT_PER_MIN=0",
    )
    group.add_argument(
        "--keep-logs", action="store_true", help="keep the data dir (process logs) afterwards"
    )
    group.add_argument(
        "--probe",
        action="store_true",
        help="load bench/_probe (a sitecustomize) into the Impri processes: per-wake events"
        " (push or re-read), publish and layer timings, event-loop lag, in the data dir",
    )
    group.add_argument(
        "--impri",
        default=None,
        help="the impri command to run (e.g. /opt/impri/bin/impri from a plain `pip install .`);"
        " default: `python -m impri` from this source tree",
    )


def parse_env(pairs: list[str]) -> dict[str, str]:
    env = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise SystemExit(f"--server-env wants NAME=VALUE, not {pair!r}")
        env[name] = value
    return env


def install_sigterm() -> None:
    """SIGTERM ends the benchmark like Ctrl-C, so every ``finally`` runs."""

    def handler(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


def raise_fd_limit() -> int:
    """Thousands of open connections need file descriptors (children inherit the limit)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 65536)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def require_loopback(url: str, what: str) -> None:
    host = urlsplit(url).hostname or ""
    if host in LOOPBACK_NAMES:
        return
    try:
        if ipaddress.ip_address(host).is_loopback:
            return
    except ValueError:
        pass
    raise SystemExit(f"{what} must be on loopback (127.0.0.1), not {host!r}")


# --- statistics -----------------------------------------------------------------------------


def percentile(values: list[float], pct: float) -> float | None:
    """Nearest-rank percentile (``pct`` in 0–100) of ``values``; None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[rank - 1]


def summary_ms(seconds: list[float]) -> dict:
    ms = [s * 1000 for s in seconds]
    return {
        "n": len(ms),
        "p50": percentile(ms, 50),
        "p90": percentile(ms, 90),
        "p99": percentile(ms, 99),
        "max": max(ms) if ms else None,
    }


def fmt(value, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def print_table(rows: list[tuple[str, str]], title: str | None = None) -> None:
    if title:
        print(f"\n{title}")
    width = max(len(name) for name, _ in rows)
    print(f"| {'metric'.ljust(width)} | value |")
    print(f"|{'-' * (width + 2)}|------:|")
    for name, value in rows:
        print(f"| {name.ljust(width)} | {value} |")


def print_problems(problems: dict) -> None:
    print(f"\nwarnings and errors in the Impri processes' logs: {problems['count']}")
    for line in problems["first"]:
        print(f"  {line}")


def write_json(path: str | None, data: dict) -> None:
    if path:
        Path(path).write_text(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
        print(f"\nJSON written to {path}")


def machine() -> dict:
    import platform

    return {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "loadavg_at_start": os.getloadavg(),
    }


# --- /proc ------------------------------------------------------------------------------------


def machine_busy_s() -> float | None:
    """CPU seconds the whole machine spent busy (all cores, all processes) since boot.

    The difference between two readings says how much of the machine a phase used: on two
    cores, 20 s busy in 10 s is every core saturated, whoever used it (Impri, PostgreSQL,
    Redis, the client).
    """
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    except OSError:
        return None
    ticks = [int(x) for x in fields]
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)  # idle + iowait
    return (sum(ticks[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def proc_status(pid: int) -> dict:
    """VmRSS (kB), Threads, open fds and CPU seconds (user + system) of a process."""
    out = {"rss_kb": None, "threads": None, "fds": None, "cpu_s": None}
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        fields = stat[stat.rfind(")") + 2 :].split()
        out["cpu_s"] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                out["rss_kb"] = int(line.split()[1])
            elif line.startswith("Threads:"):
                out["threads"] = int(line.split()[1])
        out["fds"] = len(os.listdir(f"/proc/{pid}/fd"))
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        pass
    return out


def group_pids(pgid: int) -> list[int]:
    """Every live process in process group ``pgid`` (a Celery worker's forked children too)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid pgrp ...; comm may hold spaces, so split after the last ')'.
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 2 and int(fields[2]) == pgid:
            pids.append(int(entry))
    return pids


def _socket_inodes(pid: int) -> set[int]:
    inodes = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
                if link.startswith("socket:["):
                    inodes.add(int(link[8:-1]))
    except OSError:
        pass
    return inodes


def _tcp_local_ports_by_inode(remote_port: int) -> dict[int, int]:
    """inode → local port of the TCP sockets connected to ``remote_port`` (IPv4 and IPv6)."""
    ports = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                parts = line.split()
                local, remote, inode = parts[1], parts[2], int(parts[9])
                if int(remote.rsplit(":", 1)[1], 16) == remote_port and inode:
                    ports[inode] = int(local.rsplit(":", 1)[1], 16)
    return ports


# --- the deployment ----------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Proc:
    role: str  # serve, worker, beat
    process: subprocess.Popen
    log_path: Path
    url: str | None = None
    pgid: int = field(init=False)

    def __post_init__(self) -> None:
        self.pgid = self.process.pid  # start_new_session: the leader's pid is the group id

    @property
    def pid(self) -> int:
        return self.process.pid

    def tail(self, lines: int = 40) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def stop(self, timeout: float = 15) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pgid, signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.pgid, signal.SIGKILL)
                self.process.wait(timeout=10)
        # Children that outlived their leader (a Celery pool process) go too.
        for pid in group_pids(self.pgid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


class Stack:
    """One deployment: its database, its processes, and everything needed to tear it down."""

    def __init__(
        self,
        db: str = "sqlite",
        servers: int = 1,
        *,
        pg_url: str = "postgres://postgres@127.0.0.1:5432",
        redis_url: str = "redis://127.0.0.1:6379",
        redis_dbs: str = "10-15",
        env: dict[str, str] | None = None,
        keep_logs: bool = False,
        impri: str | None = None,
        probe: bool = False,
        pg_db: str | None = None,
        port: int = 0,
    ):
        self.db = db
        self.n_servers = servers
        self.keep_logs = keep_logs
        self.pg_url = pg_url.rstrip("/")
        self.redis_base = redis_url.rstrip("/")
        self.redis_dbs = redis_dbs
        self.extra_env = dict(env or {})
        self.pg_db, self.first_port = pg_db, port
        # The command every Impri process is started with: an installed ``impri`` (as users
        # run it), or this source tree's ``python -m impri``.
        self.command = [impri] if impri else [sys.executable, "-m", "impri"]
        self.data_dir = Path(tempfile.mkdtemp(prefix="impri-bench-"))
        self.db_name: str | None = None
        self.redis_db: int | None = None
        self.procs: list[Proc] = []
        self._pg_monitor = None
        self.env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("IMPRI_", "DJANGO_")) and k not in ("DATABASE_URL", "REDIS_URL")
        }
        self.env.update(
            IMPRI_DATA_DIR=str(self.data_dir),
            SECRET_KEY="bench-" + secrets.token_hex(16),
            PYTHONUNBUFFERED="1",
            IMPRI_LOG_LEVEL="WARNING",
        )
        if not impri:
            self.env["PYTHONPATH"] = str(ROOT)
        self.probe_dir: Path | None = None
        if probe:
            # bench/_probe/sitecustomize.py: loaded by every Impri process at start.
            self.probe_dir = self.data_dir / "probe"
            self.probe_dir.mkdir()
            self.env["IMPRI_BENCH_PROBE_DIR"] = str(self.probe_dir)
            self.env["PYTHONPATH"] = os.pathsep.join(
                p for p in (str(ROOT / "bench" / "_probe"), self.env.get("PYTHONPATH")) if p
            )
        require_loopback(self.pg_url, "--pg-url")
        require_loopback(self.redis_base, "--redis")

    @classmethod
    def from_args(cls, args: argparse.Namespace, **env: str) -> Stack:
        return cls(
            args.db,
            args.servers,
            pg_url=args.pg_url,
            redis_url=args.redis,
            redis_dbs=args.redis_dbs,
            env={**env, **parse_env(args.server_env)},
            keep_logs=args.keep_logs,
            impri=args.impri,
            probe=getattr(args, "probe", False),
            pg_db=args.pg_db,
            port=args.port,
        )

    # --- lifecycle ---------------------------------------------------------------

    def __enter__(self) -> Stack:
        try:
            self.start()
        except BaseException:
            self.close(failed=True)
            raise
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        interrupted = exc_type is not None and issubclass(exc_type, KeyboardInterrupt)
        self.close(failed=exc_type is not None and not interrupted)

    @property
    def scaled(self) -> bool:
        return self.db == "postgres"

    def start(self) -> None:
        if self.scaled:
            import psycopg

            self.db_name = self.pg_db or "impri_bench_" + secrets.token_hex(5)
            with psycopg.connect(self._admin_url(), autocommit=True) as conn:
                conn.execute(f'CREATE DATABASE "{self.db_name}"')
            self.env["DATABASE_URL"] = f"{self.pg_url}/{self.db_name}"
            self.redis_db = self._pick_redis_db()
            self.env["REDIS_URL"] = f"{self.redis_base}/{self.redis_db}"
        self.env.update(self.extra_env)
        self.impri("migrate", "--no-input", "-v", "0")
        for i in range(self.n_servers):
            port = self.first_port + i if self.first_port else free_port()
            proc = self._spawn(
                "serve", ["serve", "--port", str(port), "--host", "127.0.0.1", "--no-migrate"]
            )
            proc.url = f"http://127.0.0.1:{port}"
        if self.scaled:
            self._spawn("worker", ["worker", "--loglevel", "WARNING"])
            self._spawn("beat", ["beat", "--loglevel", "WARNING"])
        for proc in self.servers:
            self._wait_ready(proc)
        time.sleep(0.5)
        for proc in self.procs:
            if proc.process.poll() is not None:
                raise RuntimeError(f"impri {proc.role} exited early:\n{proc.tail()}")

    def close(self, failed: bool = False) -> None:
        # Every group is told to stop first, so their shutdowns overlap (a loaded machine
        # takes seconds for each), then each is waited for (and killed if it lingers).
        for proc in self.procs:
            if proc.process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pgid, signal.SIGTERM)
        for proc in reversed(self.procs):
            try:
                proc.stop()
            except Exception as exc:  # keep tearing down the rest
                print(f"could not stop {proc.role} {proc.pid}: {exc}", file=sys.stderr)
        if failed:
            for proc in self.procs:
                print(f"\n--- last lines of impri {proc.role} ({proc.pid}) ---", file=sys.stderr)
                print(proc.tail(), file=sys.stderr)
        if self._pg_monitor is not None:
            with contextlib.suppress(Exception):
                self._pg_monitor.close()
            self._pg_monitor = None
        if self.db_name:
            try:
                import psycopg

                with psycopg.connect(self._admin_url(), autocommit=True) as conn:
                    conn.execute(f'DROP DATABASE IF EXISTS "{self.db_name}" WITH (FORCE)')
            except Exception as exc:
                print(f"could not drop database {self.db_name}: {exc}", file=sys.stderr)
            self.db_name = None
        if self.redis_db is not None:
            with contextlib.suppress(Exception):
                self._redis(self.redis_db).flushdb()
            self.redis_db = None
        if self.keep_logs or failed:
            print(f"logs kept in {self.data_dir}", file=sys.stderr)
        else:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def _spawn(self, role: str, args: list[str]) -> Proc:
        log_path = self.data_dir / f"{role}-{len(self.procs)}.log"
        with open(log_path, "w") as log:
            process = subprocess.Popen(
                [*self.command, *args],
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.data_dir,
                start_new_session=True,
            )
        proc = Proc(role, process, log_path)
        self.procs.append(proc)
        return proc

    def restart_serve(self, proc: Proc) -> Proc:
        """Stop a serve process and start a fresh one on the same address (the same command
        line), ready when this returns: e.g. to weigh something in a process whose heap the
        set-up's requests did not touch."""
        proc.stop()
        self.procs.remove(proc)
        port = proc.url.rsplit(":", 1)[1]
        fresh = self._spawn(
            "serve", ["serve", "--port", port, "--host", "127.0.0.1", "--no-migrate"]
        )
        fresh.url = proc.url
        self._wait_ready(fresh)
        return fresh

    def _wait_ready(self, proc: Proc, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.process.poll() is not None:
                raise RuntimeError(f"impri serve exited early:\n{proc.tail()}")
            try:
                if httpx.get(proc.url + "/healthz", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"impri serve did not come up in {timeout}s:\n{proc.tail()}")

    # --- PostgreSQL and Redis ------------------------------------------------------

    def _admin_url(self) -> str:
        return self.pg_url + "/postgres"

    def _redis(self, number: int):
        import redis

        parts = urlsplit(self.redis_base)
        return redis.Redis(host=parts.hostname, port=parts.port or 6379, db=number)

    def _pick_redis_db(self) -> int:
        low, _, high = self.redis_dbs.partition("-")
        for number in range(int(low), int(high or low) + 1):
            if self._redis(number).dbsize() == 0:
                return number
        raise RuntimeError(f"no empty Redis database among {self.redis_dbs}")

    def pg_connections(self) -> dict | None:
        """Connections to this deployment's database, by state and by Impri role.

        Taken on a separate connection to the ``postgres`` database (so it is never counted).
        A connection is attributed to a role by matching ``client_port`` to the TCP sockets
        the role's processes hold (read from /proc).
        """
        if not self.db_name:
            return None
        import psycopg

        if self._pg_monitor is None or self._pg_monitor.closed:
            self._pg_monitor = psycopg.connect(self._admin_url(), autocommit=True)
        rows = self._pg_monitor.execute(
            "SELECT coalesce(state, '?'), client_port FROM pg_stat_activity"
            " WHERE datname = %s AND pid <> pg_backend_pid()",
            (self.db_name,),
        ).fetchall()
        pg_port = urlsplit(self.pg_url).port or 5432
        port_by_inode = _tcp_local_ports_by_inode(pg_port)
        role_by_port = {}
        for proc in self.procs:
            for pid in group_pids(proc.pgid):
                for inode in _socket_inodes(pid):
                    if inode in port_by_inode:
                        role_by_port[port_by_inode[inode]] = proc.role
        by_state: dict[str, int] = {}
        by_role: dict[str, int] = {}
        for state, port in rows:
            by_state[state] = by_state.get(state, 0) + 1
            role = role_by_port.get(port, "other")
            by_role[role] = by_role.get(role, 0) + 1
        return {"total": len(rows), "by_state": by_state, "by_role": by_role}

    def pg_max_connections(self) -> int | None:
        if not self.scaled:
            return None
        import psycopg

        with psycopg.connect(self._admin_url(), autocommit=True) as conn:
            return int(conn.execute("SHOW max_connections").fetchone()[0])

    # --- the CLI -------------------------------------------------------------------

    def impri(self, *args: str, check: bool = True, timeout: float = 600):
        result = subprocess.run(
            [*self.command, *args],
            env=self.env,
            cwd=self.data_dir,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and result.returncode:
            raise RuntimeError(
                f"impri {' '.join(args)} failed ({result.returncode}):\n"
                f"{result.stdout}\n{result.stderr}"
            )
        return result

    def last_word(self, *args: str) -> str:
        """Run a command that prints a secret as the last word of its output."""
        return self.impri(*args).stdout.strip().split()[-1]

    def create_agents(
        self, count: int, prefix: str = "bench", *, cli_only: bool = False, parallel: int = 4
    ) -> list[str]:
        """Create ``count`` agents and return their keys.

        ``impri createagent`` starts Django once per agent (about a second each), so beyond a
        few agents they are created in one ``impri shell -c`` run calling the same
        ``identity.keys.create_agent`` the command calls. ``cli_only``: always through
        ``impri createagent`` (``parallel`` at a time), for a tree whose modules may have
        moved (bench/stock_parts.py).
        """
        if cli_only:
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(max_workers=parallel) as pool:
                names = [f"{prefix}-{i:05d}" for i in range(count)]
                return list(pool.map(lambda name: self.last_word("createagent", name), names))
        if count <= 3:
            return [self.last_word("createagent", f"{prefix}-{i:05d}") for i in range(count)]
        code = (
            "try:\n    from identity import keys\n"  # its home since the apps were split
            "except ImportError:\n    from approvals import keys\n"
            f"for i in range({count}):\n"
            f"    agent, raw = keys.create_agent('{prefix}-%05d' % i)\n"
            "    print('BENCHKEY', raw)\n"
        )
        out = self.impri("shell", "-c", code).stdout
        found = [line.split()[1] for line in out.splitlines() if line.startswith("BENCHKEY ")]
        if len(found) != count:
            raise RuntimeError(f"created {len(found)} agent keys, wanted {count}:\n{out[-2000:]}")
        return found

    def create_reviewer(self, name: str = "rita") -> str:
        """A reviewer in the default group; returns a reviewer token."""
        self.impri("createreviewer", name, f"--password={secrets.token_urlsafe(12)}")
        return self.last_word("token", name)

    # --- measurements ----------------------------------------------------------------

    @property
    def servers(self) -> list[Proc]:
        return [proc for proc in self.procs if proc.role == "serve"]

    @property
    def urls(self) -> list[str]:
        return [proc.url for proc in self.servers]

    def log_problems(self, limit: int = 8) -> dict:
        """WARNING / ERROR / Traceback lines in the processes' logs (read before close)."""
        count, first = 0, []
        for proc in self.procs:
            with contextlib.suppress(OSError):
                for line in proc.log_path.read_text(errors="replace").splitlines():
                    if "SecurityWarning" in line or "superuser privileges" in line:
                        continue  # Celery running as root in this sandbox
                    if " WARNING " in line or " ERROR " in line or line.startswith("Traceback"):
                        count += 1
                        if len(first) < limit:
                            first.append(f"{proc.role}: {line[:240]}")
        return {"count": count, "first": first}

    def probe_events(self) -> list[dict]:
        """Every line the probe wrote (``--probe``), each with the ``pid`` that wrote it."""
        events = []
        if self.probe_dir is None:
            return events
        for path in sorted(self.probe_dir.glob("probe-*.jsonl")):
            pid = int(path.stem.split("-")[1])
            for line in path.read_text().splitlines():
                with contextlib.suppress(ValueError):
                    events.append({**json.loads(line), "pid": pid})
        return events

    def alive(self) -> dict[str, bool]:
        return {f"{p.role}-{p.pid}": p.process.poll() is None for p in self.procs}

    def sample(self) -> dict:
        """RSS, threads, fds and CPU time of each serve process (and of this client process),
        and the PostgreSQL connections, now."""
        servers = [proc_status(proc.pid) for proc in self.servers]
        rss = [s["rss_kb"] for s in servers if s["rss_kb"] is not None]
        return {
            "at": time.time(),
            "rss_mb_total": sum(rss) / 1024 if rss else None,
            "rss_mb": [s["rss_kb"] / 1024 if s["rss_kb"] else None for s in servers],
            "threads": [s["threads"] for s in servers],
            "fds": [s["fds"] for s in servers],
            "cpu_s": [s["cpu_s"] for s in servers],
            "client_cpu_s": time.process_time(),
            "machine_busy_s": machine_busy_s(),
            "pg": self.pg_connections(),
            "redis": self.redis_info(),
        }

    def redis_info(self) -> dict | None:
        """Diagnostics only (nothing waits on them): keys in the deployment's Redis database,
        and how many of them are channel-layer groups (``asgi:group:*``, channels_redis)."""
        if self.redis_db is None:
            return None
        with contextlib.suppress(Exception):
            r = self._redis(self.redis_db)
            groups = sum(1 for _ in r.scan_iter(match="asgi:group:*", count=1000))
            return {"keys": r.dbsize(), "groups": groups}
        return None


def peak(samples: list[dict]) -> dict:
    """The largest value of each measurement over ``samples``."""
    if not samples:
        return {}

    def most(values):
        values = [v for v in values if v is not None]
        return max(values) if values else None

    n = len(samples[0]["threads"])
    pg = [s["pg"] for s in samples if s["pg"]]
    return {
        "samples": len(samples),
        "rss_mb_total": most(s["rss_mb_total"] for s in samples),
        "threads": [most(s["threads"][i] for s in samples) for i in range(n)],
        "fds": [most(s["fds"][i] for s in samples) for i in range(n)],
        "pg_total": most(p["total"] for p in pg) if pg else None,
        "pg_serve": most(p["by_role"].get("serve", 0) for p in pg) if pg else None,
    }
