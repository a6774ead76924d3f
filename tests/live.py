"""Real Impri servers for end-to-end tests: `impri serve` (daphne) as subprocesses.

On the embedded leg each deployment gets a fresh data dir (SQLite, in-memory
layer). On the scaled leg (DATABASE_URL set) it gets a fresh PostgreSQL
database and its own keys in the Redis of REDIS_URL (``IMPRI_REDIS_PREFIX``), so
deployments that pytest-xdist's workers run at the same time never see each
other's wake-ups or tasks. Several servers of one deployment share its database
and keys, like daphne processes behind a proxy.

A deployment whose first server starts before any command of its own ran starts
from a copy of a database migrated once per test process (:class:`_Template`);
the server's own migrate still runs, and finds nothing to apply.
"""

from __future__ import annotations

import atexit
import json
import os
import secrets
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx

ROOT = Path(__file__).resolve().parent.parent


# `impri shell -c` code: run the commands given as JSON, print what each printed as JSON.
_COMMANDS = """
import io, json
from django.core.management import call_command
printed = []
for args in json.loads({commands!r}):
    out = io.StringIO()
    call_command(*args, stdout=out)
    printed.append(out.getvalue())
print(json.dumps(printed))
"""


def last_word(printed: str) -> str:
    """The secret a command prints as the last word of its last line."""
    return printed.strip().splitlines()[-1].split()[-1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Deployment:
    """One database (and channel layer) that any number of servers and commands share."""

    def __init__(self, **env: str):
        self.data_dir = Path(tempfile.mkdtemp(prefix="impri-e2e-"))
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("IMPRI_", "DJANGO_"))}
        self.env.pop("DATABASE_URL", None)
        self.env.pop("REDIS_URL", None)
        self.env.update(
            IMPRI_DATA_DIR=str(self.data_dir),
            SECRET_KEY="e2e-" + secrets.token_hex(16),
            # /metrics on: tests wait on its impri_waiters gauge (tests.waits.until_server_waits).
            IMPRI_METRICS_TOKEN="e2e-metrics-" + secrets.token_hex(8),
            PYTHONPATH=str(ROOT),
            PYTHONUNBUFFERED="1",
        )
        self.db_name = None
        base_url = os.environ.get("DATABASE_URL")
        if base_url:
            self.db_name = "impri_e2e_" + secrets.token_hex(6)
            self._admin_sql(base_url, f'CREATE DATABASE "{self.db_name}"')
            parts = urlsplit(base_url)
            self.env["DATABASE_URL"] = urlunsplit(parts._replace(path="/" + self.db_name))
            self.base_db_url = base_url
        self.redis_prefix = ""
        if os.environ.get("REDIS_URL"):
            self.env["REDIS_URL"] = os.environ["REDIS_URL"]
            self.redis_prefix = f"e2e-{secrets.token_hex(6)}:"
            self.env["IMPRI_REDIS_PREFIX"] = self.redis_prefix
        self.env.update(env)
        self.servers: list[Server] = []
        # A database of our making that nothing has touched yet: it may start as a copy.
        self.untouched = "IMPRI_DATA_DIR" not in env and "DATABASE_URL" not in env

    @staticmethod
    def _admin_sql(url: str, sql: str) -> None:
        import psycopg

        parts = urlsplit(url)
        admin = urlunsplit(parts._replace(path="/postgres"))
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(sql)

    def impri(self, *args: str, check: bool = True, **env: str) -> subprocess.CompletedProcess:
        self.untouched = False
        return subprocess.run(
            [sys.executable, "-m", "impri", *args],
            env={**self.env, **env},
            capture_output=True,
            text=True,
            check=check,
            timeout=120,
        )

    def last_word(self, *args: str) -> str:
        """Run a command that prints a secret as the last word of its last line."""
        return last_word(self.impri(*args).stdout)

    def commands(self, *commands: tuple[str, ...]) -> list[str]:
        """Several `impri` commands one after the other in one process (Django's
        ``call_command`` in `impri shell`: each command's own code): what each printed. A
        fixture that makes an agent, a reviewer and a token pays for one Python start instead
        of three, about 1.5 s of CPU each."""
        code = _COMMANDS.format(commands=json.dumps([list(command) for command in commands]))
        done = self.impri("shell", "--no-imports", "-c", code, check=False)
        if done.returncode:
            raise RuntimeError(f"impri commands {commands} failed:\n{done.stderr[-4000:]}")
        return json.loads(done.stdout.strip().splitlines()[-1])

    def agent_and_reviewer(
        self, agent: str = "support-bot", reviewer: str = "rita", *, password: bool = True
    ) -> tuple[str, str]:
        """An agent's key and a reviewer's token: createagent, createreviewer (with the
        password ``<reviewer>-password``) and token, in one process."""
        made = ("createreviewer", reviewer)
        if password:
            made += ("--password", f"{reviewer}-password")
        key, _, token = self.commands(("createagent", agent), made, ("token", reviewer))
        return last_word(key), last_word(token)

    def start_server(self, **env: str) -> Server:
        if self.untouched and "IMPRI_DATA_DIR" not in env and "DATABASE_URL" not in env:
            _TEMPLATE.copy_into(self)
            self.untouched = False
        server = Server(self, migrate=not self.servers, env=env)
        self.servers.append(server)
        return server

    def close(self) -> None:
        for server in self.servers:
            server.stop()
        if self.db_name:
            self._admin_sql(
                self.base_db_url, f'DROP DATABASE IF EXISTS "{self.db_name}" WITH (FORCE)'
            )
        shutil.rmtree(self.data_dir, ignore_errors=True)


class Server:
    def __init__(self, deployment: Deployment, *, migrate: bool, env: dict):
        self.deployment = deployment
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.metrics_token = {**deployment.env, **env}["IMPRI_METRICS_TOKEN"]
        args = [sys.executable, "-m", "impri", "serve", "--port", str(self.port)]
        if not migrate:
            args.append("--no-migrate")
        self.log = open(deployment.data_dir / f"server-{self.port}.log", "w+")  # noqa: SIM115
        self.process = subprocess.Popen(
            args,
            env={**deployment.env, **env},
            stdout=self.log,
            stderr=subprocess.STDOUT,
            cwd=deployment.data_dir,
        )
        self._wait_ready()

    def _wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"impri serve exited early:\n{self.output()}")
            try:
                if httpx.get(self.url + "/healthz", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)  # another process starting: a bounded poll, nothing to await
        raise RuntimeError(f"impri serve did not come up in {timeout}s:\n{self.output()}")

    def output(self) -> str:
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def client(self, key: str | None = None, timeout: float = 30) -> httpx.Client:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.Client(base_url=self.url + "/api/v1", headers=headers, timeout=timeout)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()


class _Template:
    """A database migrated once in this test process, copied into new deployments.

    Migrating a new database costs a few seconds of CPU more than a migrate that finds
    nothing to do, and the suite starts dozens of deployments. The copy is the file on
    SQLite and ``CREATE DATABASE ... TEMPLATE`` on PostgreSQL; what migrate writes besides
    the schema (content types, permissions) is the same in every deployment, and no
    migration reads the environment a deployment is given. Removed when the process ends.
    """

    def __init__(self) -> None:
        self.deployment: Deployment | None = None

    def _made(self) -> Deployment:
        if self.deployment is None:
            made = Deployment()
            atexit.register(made.close)
            made.impri("migrate", "--no-input")
            if made.db_name is None:  # the whole database in the one file
                with sqlite3.connect(made.data_dir / "impri.sqlite3") as conn:
                    busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
                assert busy == 0, "the template's WAL could not be written back"
            self.deployment = made
        return self.deployment

    def copy_into(self, deployment: Deployment) -> None:
        template = self._made()
        if template.db_name is None:
            shutil.copy2(template.data_dir / "impri.sqlite3", deployment.data_dir / "impri.sqlite3")
        else:
            name = deployment.db_name
            deployment._admin_sql(deployment.base_db_url, f'DROP DATABASE "{name}"')
            deployment._admin_sql(
                deployment.base_db_url, f'CREATE DATABASE "{name}" TEMPLATE "{template.db_name}"'
            )


_TEMPLATE = _Template()
