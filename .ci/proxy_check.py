#!/usr/bin/env python3
"""CI leg: the README's reverse-proxy example (deploy/Caddyfile, `tls internal`) in front of Impri.

Caddy (Debian's package) runs deploy/Caddyfile with two substitutions only: the
upstream host `web` (compose's service) becomes `localhost`, and its port the
loopback port of an `impri serve` started here. A global block keeps Caddy's
state in a temporary directory and off the system (no admin endpoint, no trust
store install, no port-80 redirect listener). Then, over HTTPS verified
against Caddy's own internal CA: /readyz answers, the inbox redirects to the
login page, and an agent pushes an action and long-polls its decision.

Usage: python .ci/proxy_check.py   (with Impri importable by this python)
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from install_check import free_port, refund  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
WORK = Path(tempfile.mkdtemp(prefix="impri-proxy-"))


def log(message: str) -> None:
    print(f"proxy-check: {message}", flush=True)


def caddyfile(upstream_port: int) -> str:
    text = (ROOT / "deploy/Caddyfile").read_text()
    assert "dynamic a web 8000" in text and "tls internal" in text
    text = text.replace("dynamic a web 8000", f"dynamic a localhost {upstream_port}")
    return (
        "{\n\tadmin off\n\tskip_install_trust\n\tauto_https disable_redirects\n"
        f"\tstorage file_system {WORK / 'caddy'}\n}}\n\n{text}"
    )


def ensure_caddy() -> str:
    if not shutil.which("caddy"):
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
        subprocess.run(["apt-get", "install", "-y", "-qq", "caddy"], check=True, env=env)
    return shutil.which("caddy")


def main() -> None:
    caddy = ensure_caddy()
    impri_port, https_port = free_port(), free_port()
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("IMPRI_", "DJANGO_"))
        and k not in ("DATABASE_URL", "REDIS_URL", "SECRET_KEY")
    }
    env.update(IMPRI_DATA_DIR=str(WORK / "data"), IMPRI_BEHIND_PROXY="true")
    (WORK / "Caddyfile").write_text(caddyfile(impri_port))
    processes = []
    try:
        processes.append(
            subprocess.Popen(
                [sys.executable, "-m", "impri", "serve", "--port", str(impri_port)],
                env=env,
                cwd=WORK,
                stdout=open(WORK / "impri.log", "w"),  # noqa: SIM115
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )
        processes.append(
            subprocess.Popen(
                [caddy, "run", "--config", str(WORK / "Caddyfile"), "--adapter", "caddyfile"],
                env={**env, "IMPRI_DOMAIN": f"localhost:{https_port}", "HOME": str(WORK)},
                cwd=WORK,
                stdout=open(WORK / "caddy.log", "w"),  # noqa: SIM115
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )
        check(https_port, env)
    except BaseException:
        for name in ("impri.log", "caddy.log"):
            path = WORK / name
            if path.exists():
                print(f"--- {name}\n{path.read_text(errors='replace')[-3000:]}")
        raise
    finally:
        for process in processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
                process.wait(timeout=20)
        shutil.rmtree(WORK, ignore_errors=True)


def check(https_port: int, env: dict) -> None:
    base = f"https://localhost:{https_port}"
    root_ca = WORK / "caddy/pki/authorities/local/root.crt"
    deadline = time.monotonic() + 90
    context = None
    while True:
        try:
            if context is None and root_ca.exists():
                context = ssl.create_default_context(cafile=str(root_ca))
            if context is not None:
                with urllib.request.urlopen(base + "/readyz", context=context, timeout=3) as r:
                    if r.status == 200:
                        break
        except (urllib.error.URLError, OSError, ssl.SSLError):
            pass
        if time.monotonic() > deadline:
            raise SystemExit("proxy-check: /readyz never answered through Caddy")
        time.sleep(0.5)
    log("HTTPS (Caddy's internal CA) -> /readyz 200")

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None

    opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=context), NoRedirect())
    try:
        opener.open(base + "/inbox/", timeout=10)
        raise SystemExit("proxy-check: /inbox/ did not redirect to the login page")
    except urllib.error.HTTPError as exc:
        assert exc.code == 302 and exc.headers["Location"].startswith("/accounts/login/"), (
            exc.code,
            exc.headers,
        )
    log("/inbox/ -> login")

    key = subprocess.run(
        [sys.executable, "-m", "impri", "createagent", "proxy-bot"],
        env=env,
        cwd=WORK,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()[-1]

    def api(method: str, path: str, body: dict | None = None) -> dict:
        request = urllib.request.Request(
            base + "/api/v1" + path,
            method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, context=context, timeout=30) as response:
            return json.loads(response.read())

    action = api("POST", "/actions", refund("Refund $3 through the proxy", 300))
    assert action["inbox_url"].startswith(f"https://localhost:{https_port}/"), action["inbox_url"]
    started = time.monotonic()
    decision = api("GET", f"/actions/{action['action_id']}/decision?timeout_s=2")
    assert decision["status"] == "pending" and time.monotonic() - started >= 1.5, decision
    log("push and a 2 s long-poll through the proxy; inbox_url is the proxy's https address")


if __name__ == "__main__":
    main()
