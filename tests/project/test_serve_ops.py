"""`impri serve` as a probe, a proxy and a log collector see it (a real daphne process)."""

from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest

from tests.live import Deployment, free_port

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def served():
    """One server with JSON logs; stdout and stderr kept apart."""
    deployment = Deployment(IMPRI_LOG_FORMAT="json")
    port = free_port()
    out = open(deployment.data_dir / "stdout.log", "w+")  # noqa: SIM115
    err = open(deployment.data_dir / "stderr.log", "w+")  # noqa: SIM115
    process = subprocess.Popen(
        [sys.executable, "-m", "impri", "serve", "--port", str(port)],
        env=deployment.env,
        cwd=deployment.data_dir,
        stdout=out,
        stderr=err,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        assert process.poll() is None, (deployment.data_dir / "stderr.log").read_text()
        try:
            if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                break
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, "impri serve did not come up"
        time.sleep(0.1)
    yield url, deployment
    process.terminate()
    process.wait(timeout=15)
    out.close()
    err.close()
    deployment.close()


def log_lines(deployment) -> list[dict]:
    text = (deployment.data_dir / "stderr.log").read_text()
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def wait_for_line(deployment, match) -> dict:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        found = [line for line in log_lines(deployment) if match(line)]
        if found:
            return found[-1]
        time.sleep(0.1)
    raise AssertionError(f"no such log line in {log_lines(deployment)}")


@pytest.mark.parametrize("host", ["10.1.2.3:8000", "impri-web-7f9c", "evil.example"])
def test_probes_answer_whatever_the_host_header(served, host):
    url, _ = served
    assert httpx.get(url + "/healthz", headers={"Host": host}).json() == {"status": "ok"}
    ready = httpx.get(url + "/readyz", headers={"Host": host})
    assert ready.status_code == 200
    assert ready.json()["checks"] == {"database": "ok", "channel_layer": "ok", "audit_log": "ok"}


def test_a_disallowed_host_is_refused_with_one_log_line(served):
    url, deployment = served
    response = httpx.get(url + "/inbox/", headers={"Host": "evil.example", "X-Request-ID": "dh-1"})
    assert response.status_code == 400
    warning = wait_for_line(deployment, lambda line: line["logger"].endswith("DisallowedHost"))
    assert "evil.example" in warning["message"]
    assert "exc_info" not in warning
    assert "Traceback" not in (deployment.data_dir / "stderr.log").read_text()


def test_every_request_logs_a_json_line_with_its_id_and_duration(served):
    url, deployment = served
    response = httpx.get(url + "/api/v1/actions", headers={"X-Request-ID": "req-42"})
    assert response.status_code == 401
    assert response.headers["x-request-id"] == "req-42"
    access = wait_for_line(
        deployment,
        lambda line: line.get("request_id") == "req-42" and line["logger"] == "impri.access",
    )
    assert access["method"] == "GET"
    assert access["path"] == "/api/v1/actions"
    assert access["status"] == 401
    assert isinstance(access["duration_ms"], float) and access["duration_ms"] >= 0
    # What Django logged inside the request carries the same id.
    inner = wait_for_line(
        deployment,
        lambda line: line["logger"] == "django.request" and line.get("request_id") == "req-42",
    )
    assert inner["level"] == "WARNING"


def test_a_forged_request_id_is_replaced(served):
    url, _ = served
    response = httpx.get(url + "/api/v1/actions", headers={"X-Request-ID": "x\ty" + "z" * 100})
    generated = response.headers["x-request-id"]
    assert len(generated) == 16 and generated.isalnum()


def test_logs_and_banners_go_to_stderr_and_stdout_stays_empty(served):
    url, deployment = served
    httpx.get(url + "/inbox/")
    stderr = (deployment.data_dir / "stderr.log").read_text()
    assert f"data directory {deployment.data_dir}; database " in stderr
    assert "Impri is listening on" in stderr
    assert (deployment.data_dir / "stdout.log").read_text() == ""


def _connect_burst(port: int, count: int, within_s: float) -> int:
    """Start ``count`` connections at once; how many the kernel completes within ``within_s``."""
    selector = selectors.DefaultSelector()
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.setblocking(False)
            sock.connect_ex(("127.0.0.1", port))
            selector.register(sock, selectors.EVENT_WRITE)
            sockets.append(sock)
        connected = 0
        deadline = time.monotonic() + within_s
        while connected < count and (left := deadline - time.monotonic()) > 0:
            for key, _ in selector.select(left):
                selector.unregister(key.fileobj)
                connected += key.fileobj.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0
        return connected
    finally:
        for sock in sockets:
            sock.close()
        selector.close()


@pytest.mark.parametrize(
    ("backlog", "queued"),
    [(None, lambda n: n == 300), ("50", lambda n: 50 <= n < 100)],
    ids=["default", "twisted-default-50"],
)
def test_a_burst_of_connections_while_the_server_is_busy_is_queued_not_dropped(backlog, queued):
    """300 agents connecting at once while the process accepts nothing: the kernel queues them all.

    Twisted's default listen queue is 50: the rest of such a burst was dropped, and
    each of those agents waited for SYN retries (1 s, 3 s, ...) or failed. The second
    case sets the old queue to show what the first one guards against.
    """
    deployment = Deployment(**({"IMPRI_LISTEN_BACKLOG": backlog} if backlog else {}))
    try:
        server = deployment.start_server()
        os.kill(server.process.pid, signal.SIGSTOP)  # busy: it accepts nothing meanwhile
        try:
            connected = _connect_burst(server.port, 300, within_s=2.0)
        finally:
            os.kill(server.process.pid, signal.SIGCONT)
        assert queued(connected), connected
        assert httpx.get(server.url + "/healthz", timeout=10).status_code == 200
    finally:
        deployment.close()
