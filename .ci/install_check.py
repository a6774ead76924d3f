#!/usr/bin/env python3
"""CI leg: Impri installed with a plain `pip install .` (no extras) runs and delivers webhooks.

1. A fresh virtualenv and the wheel built from this clone's files (what `pip install .`
   builds: the install the README and the image use), without the test extra that the
   other legs install.
2. Embedded: `impri serve` on SQLite, started from an empty directory; an agent pushes
   an action with a callback URL on a loopback receiver, a reviewer approves it, and the
   signed webhook arrives (sent by serve's own ticker). Then a superuser opens every page
   linked from the admin index, each changelist's first object, the inbox, the dashboard,
   the gateway's review page and the API docs: all 200 (.ci/page_crawl.py).
3. Scaled (PostgreSQL + Redis, when DATABASE_URL and REDIS_URL are set): `impri
   migrate`, `impri serve --no-migrate`, `impri worker` and `impri beat`, and
   the same delivery, sent by the worker.

Only the standard library here: this script runs with the system python3, and
the installed Impri is driven only through its `impri` command and HTTP.
Usage: .ci/install_check.py   (exit status 0: both modes delivered)
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from page_crawl import crawl

ROOT = Path(__file__).resolve().parent.parent
WORK = Path(tempfile.mkdtemp(prefix="impri-install-"))
VENV = WORK / "venv"
IMPRI = VENV / "bin" / "impri"


def log(message: str) -> None:
    print(f"install-check: {message}", flush=True)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Receiver:
    """A loopback HTTP server that records each POST and checks its webhook signature."""

    def __init__(self):
        self.requests: list[dict] = []
        self.secret: bytes | None = None
        received = self.requests

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                received.append({"headers": dict(self.headers.items()), "body": body})
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def wait(self, timeout: float, logs) -> dict:
        deadline = time.monotonic() + timeout
        while not self.requests:
            if time.monotonic() > deadline:
                raise SystemExit(f"install-check: no webhook within {timeout}s\n{logs()}")
            time.sleep(0.2)
        return self.requests[0]

    def verify(self, request: dict, secret: str) -> bool:
        h = {k.lower(): v for k, v in request["headers"].items()}
        key = base64.b64decode(secret.removeprefix("whsec_"))
        signed = f"{h['webhook-id']}.{h['webhook-timestamp']}.".encode() + request["body"]
        expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
        return f"v1,{expected}" in h["webhook-signature"].split()

    def close(self):
        self.server.shutdown()


class Stack:
    """The processes of one deployment, all from the fresh install, each with its own log."""

    def __init__(self, name: str, env: dict[str, str]):
        self.name = name
        self.dir = WORK / name
        self.dir.mkdir()
        self.env = {**env, "IMPRI_DATA_DIR": str(self.dir / "data")}
        # Where each command starts: an empty folder, never the checkout (whose packages
        # would shadow the installed ones were the working directory on sys.path).
        self.cwd = self.dir / "cwd"
        self.cwd.mkdir()
        self.processes: list[tuple[str, subprocess.Popen]] = []

    def run(self, *args: str, **env: str) -> str:
        done = subprocess.run(
            [str(IMPRI), *args],
            env={**self.env, **env},
            cwd=self.cwd,
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            raise SystemExit(f"install-check: impri {' '.join(args)} failed:\n{done.stderr}")
        return done.stdout

    def start(self, name: str, *args: str) -> None:
        out = open(self.dir / f"{name}.log", "w")  # noqa: SIM115
        process = subprocess.Popen(
            [str(IMPRI), *args],
            env=self.env,
            cwd=self.cwd,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.processes.append((name, process))

    def logs(self) -> str:
        return "\n".join(
            f"--- {path.name}\n{path.read_text(errors='replace')[-3000:]}"
            for path in sorted(self.dir.glob("*.log"))
        )

    def stop(self) -> None:
        for _, process in self.processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for _, process in self.processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def http(method: str, url: str, key: str, body: dict | None = None) -> dict:
    request = urllib.request.Request(
        url,
        method=method,
        data=json.dumps(body or {}).encode(),
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        raise SystemExit(f"install-check: {method} {url} -> {exc.code} {exc.read()!r}") from None


def refund(title: str, amount_cents: int, **extra) -> dict:
    """A push body (the README's refund, smaller)."""
    return {
        "kind": "payment.refund",
        "title": title,
        "preview": {"format": "markdown", "body": f"Refund **{amount_cents / 100:.2f}**."},
        "payload": {"order_id": "7", "amount_cents": amount_cents, "currency": "USD"},
        "target_url": "https://shop.example.com/admin/orders/7",
        **extra,
    }


def wait_healthy(base: str, stack: Stack) -> None:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        for name, process in stack.processes:
            if process.poll() is not None:
                raise SystemExit(f"install-check: {name} exited early\n{stack.logs()}")
        try:
            with urllib.request.urlopen(base + "/readyz", timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.3)
    raise SystemExit(f"install-check: the server did not become ready\n{stack.logs()}")


def deliver_one_webhook(stack: Stack, *, scaled: bool) -> tuple[str, str]:
    """Serve, push, approve, receive the signed webhook; returns the base URL and the action."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    if scaled:
        stack.run("migrate", "--no-input")
        stack.start("serve", "serve", "--no-migrate", "--port", str(port))
        stack.start("worker", "worker", "--concurrency=1")
        stack.start("beat", "beat")
    else:
        stack.start("serve", "serve", "--port", str(port))
    wait_healthy(base, stack)
    agent = stack.run("createagent", "install-bot").split()[-1]
    secret = stack.run(
        "shell",
        "--no-imports",
        "-c",
        "from approvals.models import Agent; print(Agent.objects.get(name='install-bot').webhook_secret)",
    ).split()[-1]
    stack.run("createreviewer", "rita")
    rita = stack.run("token", "rita").split()[-1]

    receiver = Receiver()
    try:
        action = http(
            "POST",
            base + "/api/v1/actions",
            agent,
            refund("Refund $12.00 on order 7", 1200, callback_url=receiver.url),
        )
        http("POST", f"{base}/api/v1/actions/{action['action_id']}/approve", rita)
        got = receiver.wait(90, stack.logs)
        event = json.loads(got["body"])
        if event.get("action_id") != action["action_id"] or event.get("status") != "approved":
            raise SystemExit(f"install-check: unexpected webhook {event}")
        if not receiver.verify(got, secret):
            raise SystemExit(f"install-check: bad webhook signature {got['headers']}")
    finally:
        receiver.close()
    if scaled:
        worker_log = (stack.dir / "worker.log").read_text()
        if "succeeded in" in worker_log or "Traceback" in worker_log:
            raise SystemExit(f"install-check: the worker log is noisy or failed:\n{worker_log}")
    log(f"{stack.name}: webhook delivered and verified")
    return base, action["action_id"]


def admin_sql(url: str, sql: str) -> None:
    parts = urlsplit(url)
    admin = urlunsplit(parts._replace(path="/postgres"))
    subprocess.run(["psql", admin, "-q", "-c", sql], check=True)


def build_wheel() -> Path:
    """The wheel of this clone's files (tracked and new, not ignored: no build/, no egg-info)."""
    source, dist = WORK / "source", WORK / "dist"
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for path in filter(None, listed.split("\0")):
        if (ROOT / path).is_file():
            (source / path).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / path, source / path)
    pip = str(VENV / "bin" / "pip")
    subprocess.run([pip, "wheel", "-q", "--no-deps", "-w", str(dist), str(source)], check=True)
    [wheel] = dist.glob("impri-*.whl")
    return wheel


def main() -> None:
    log(f"fresh virtualenv in {VENV}; the wheel of {ROOT}, installed (no extras)")
    subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    wheel = build_wheel()
    subprocess.run([str(VENV / "bin" / "pip"), "install", "-q", str(wheel)], check=True)
    subprocess.run([str(IMPRI), "--version"], check=True)
    test_only = [m for m in ("pytest", "playwright", "time_machine") if _importable(m)]
    if test_only:
        raise SystemExit(f"install-check: test-only packages in a plain install: {test_only}")

    base_env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("IMPRI_", "DJANGO_"))
        and k not in ("DATABASE_URL", "REDIS_URL", "SECRET_KEY")
    }
    # The SSRF guard refuses loopback callbacks unless this network is allowed.
    base_env.update(
        IMPRI_CALLBACK_ALLOWED_NETWORKS="127.0.0.0/8", IMPRI_TICK_S="0.5", PYTHONUNBUFFERED="1"
    )

    embedded = Stack("embedded", base_env)
    try:
        base, action_id = deliver_one_webhook(embedded, scaled=False)
        crawl(base, embedded, action_id)
    finally:
        embedded.stop()

    database_url, redis_url = os.environ.get("DATABASE_URL"), os.environ.get("REDIS_URL")
    if not (database_url and redis_url):
        log("scaled: skipped (set DATABASE_URL and REDIS_URL to run it)")
        return
    name = "impri_install_" + secrets.token_hex(4)
    admin_sql(database_url, f'CREATE DATABASE "{name}"')
    url = urlunsplit(urlsplit(database_url)._replace(path="/" + name))
    scaled = Stack(
        "scaled",
        {
            **base_env,
            "DATABASE_URL": url,
            "REDIS_URL": redis_url,
            "SECRET_KEY": secrets.token_hex(32),
        },
    )
    try:
        deliver_one_webhook(scaled, scaled=True)
    finally:
        scaled.stop()
        admin_sql(database_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _importable(module: str) -> bool:
    probe = subprocess.run(
        [str(VENV / "bin" / "python"), "-c", f"import {module}"], capture_output=True
    )
    return probe.returncode == 0


if __name__ == "__main__":
    main()
