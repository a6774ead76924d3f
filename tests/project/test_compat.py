"""What each override in ``compat/`` relies on upstream still holds, as behaviour.

``compat/`` holds every use of a third-party library's private API; each module's docstring
says what it overrides, why, and its exit plan. The tests here fail when the upstream
*behaviour* an override relies on changes (an upgrade that drops Django's mark on a test
case's atomic blocks, an httpx transport that no longer uses the pool it is given), never
because some line of the upstream function changed: a patch release that keeps the
behaviour passes, and CI's newest-versions leg (``.ci/run``) runs these on the newest
versions pyproject.toml allows the day they ship. (That compat imports none of our
packages is import-linter's: it is the lowest floor.)
"""

from __future__ import annotations

import io
import json
import threading
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import anyio
import httpcore
import httpx
import pytest
from django.contrib.sessions.middleware import SessionMiddleware
from django.db import connection, transaction
from django.test import RequestFactory

from compat.django import in_code_atomic_block
from compat.httpx import PoolTransport
from compat.mozilla_django_oidc import LazyEndpointRequestView, LazyEndpointsBackend

# --- compat.django.in_code_atomic_block: Django marks the blocks TestCase opens ----------


def test_a_test_cases_own_atomic_blocks_are_not_code_blocks(db):
    # pytest-django's `db` runs the test inside django.test.TestCase's atomic blocks.
    assert connection.in_atomic_block and connection.atomic_blocks
    assert not in_code_atomic_block(connection)
    with transaction.atomic():
        assert in_code_atomic_block(connection)
        with transaction.atomic():
            assert in_code_atomic_block(connection)
    assert not in_code_atomic_block(connection)


def test_a_service_that_forgot_its_transaction_fails_under_test(db):
    """What the mark is for: audit.log.record outside code's transaction is refused, in tests too."""
    from audit import log

    with pytest.raises(RuntimeError, match="inside the transaction"):
        log.record("compat.check", actor_type="system", actor_id="compat")
    with transaction.atomic():
        log.record("compat.check", actor_type="system", actor_id="compat")


# --- compat.httpx.PoolTransport: httpx's transport over the pool the guard builds -----------


class _Answer(BaseHTTPRequestHandler):
    body = b'{"ok": true}'
    seen: list[str]

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.seen.append(f"{self.command} {self.path} {self.rfile.read(length).decode()}")
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    do_GET = do_POST = _answer

    def log_message(self, *args) -> None:
        pass


@contextmanager
def answering(host: str = "127.0.0.1"):
    """A tiny HTTP server in a thread on ``host`` (no process): ``(base_url, requests seen)``."""
    seen: list[str] = []
    handler = type("Handler", (_Answer,), {"seen": seen})
    server = ThreadingHTTPServer((host, 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://{host}:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


class _RecordingBackend(httpcore.NetworkBackend):
    def __init__(self) -> None:
        self.inner = httpcore.SyncBackend()
        self.connected: list[tuple[str, int]] = []

    def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        self.connected.append((host, port))
        return self.inner.connect_tcp(host, port, timeout=timeout)


def test_httpx_sends_through_the_pool_it_is_given():
    backend = _RecordingBackend()
    pool = httpcore.ConnectionPool(network_backend=backend, max_keepalive_connections=0)
    with answering() as (base, seen), httpx.Client(transport=PoolTransport(pool)) as client:
        answer = client.post(base + "/hook", content=b"sent")
    assert answer.status_code == 200 and answer.json() == {"ok": True}
    assert seen == ["POST /hook sent"]
    assert [host for host, _ in backend.connected] == ["127.0.0.1"]


def test_the_guard_refuses_a_loopback_address_outside_the_allow_list(settings):
    """A server listens on 127.0.0.2, outside the allow-list: the guarded client never reaches it."""
    from plumbing import outbound

    settings.IMPRI_CALLBACK_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    with answering("127.0.0.1") as (allowed, allowed_seen):
        with outbound.client("compat-test") as client:
            assert client.get(allowed + "/ok").status_code == 200
        assert allowed_seen == ["GET /ok "]
    with answering("127.0.0.2") as (refused, refused_seen):
        with outbound.client("compat-test") as client, pytest.raises(outbound.Refused):
            client.get(refused + "/no")
        assert refused_seen == []


# --- compat.mozilla_django_oidc: the provider's endpoints, asked for at request time --------


class _Endpoints(LazyEndpointsBackend):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.asked: list[str] = []
        self.base = ""

    def endpoint(self, name: str) -> str:
        self.asked.append(name)
        return f"{self.base}/{name}"


def test_the_backend_builds_without_the_provider_and_asks_at_request_time(settings):
    for name in ("OIDC_OP_TOKEN_ENDPOINT", "OIDC_OP_USER_ENDPOINT", "OIDC_OP_JWKS_ENDPOINT"):
        assert not hasattr(settings, name)  # nothing configured: only the properties say where
    backend = _Endpoints()
    assert backend.asked == []  # building it fetched and asked nothing
    with answering() as (base, seen):
        backend.base = base
        token = backend.get_token({"code": "the-code"})  # the library's own method
        userinfo = backend.get_userinfo("access", "id", {})
    assert token == {"ok": True} and userinfo == {"ok": True}
    assert backend.asked == ["token_endpoint", "userinfo_endpoint"]
    assert seen[0].startswith("POST /token_endpoint ") and "code=the-code" in seen[0]
    assert seen[1].startswith("GET /userinfo_endpoint")


def test_the_redirect_goes_to_the_endpoint_given_at_request_time(settings):
    settings.OIDC_RP_CLIENT_ID = "impri-compat"
    request = RequestFactory().get("/accounts/oidc/authenticate/")
    SessionMiddleware(lambda r: None).process_request(request)
    view = LazyEndpointRequestView()
    view.setup(request)
    response = view.redirect_to_provider(request, "https://idp.test/authorize")
    assert response.status_code == 302
    location = response["Location"]
    assert location.startswith("https://idp.test/authorize?"), location
    for part in ("client_id=impri-compat", "state=", "nonce=", "response_type=code"):
        assert part in location, location
    assert request.session["oidc_states"]  # the library keeps its state to check the callback


# --- compat.mcp.run_on_streams: the SDK serving over the stdio streams we open ---------------


async def test_stdio_over_our_own_lines_refuses_a_duplicate_key_and_keeps_serving(db):
    from mcp.server.stdio import stdio_server

    from agent_doors.mcp.stdio import CheckedLines
    from agent_doors.mcp.tools import build_server
    from compat.mcp import run_on_streams

    hello = {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "compat", "version": "1"},
    }
    lines = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        '{"jsonrpc": "2.0", "id": 2, "method": "ping", "method": "tools/list"}',
        {"jsonrpc": "2.0", "id": 3, "method": "ping"},
    ]
    out = io.StringIO()

    async def stdin():
        for line in lines:
            yield (line if isinstance(line, str) else json.dumps(line)) + "\n"
        while out.getvalue().count("\n") < 3:  # every answer written: then the end of input
            await anyio.sleep(0.01)

    checked = CheckedLines(stdin())
    with anyio.fail_after(30):
        async with stdio_server(stdin=checked, stdout=anyio.wrap_file(out)) as (read, write):
            checked.answer_on(write)
            await run_on_streams(build_server(), read, write)
    replies = {reply["id"]: reply for reply in map(json.loads, out.getvalue().splitlines())}
    assert set(replies) == {1, 2, 3}, replies
    assert replies[1]["result"]["serverInfo"]["name"] == "impri"
    assert 'duplicate key "method"' in replies[2]["error"]["message"]
    assert replies[3]["result"] == {}


# --- What stays in compat/ ------------------------------------------------------------------


def test_compat_holds_only_what_correctness_needs():
    """Four modules, each for correctness, each with its exit plan and no source digests:
    serving and the database use no private API (issue 41); a new override has to be
    added here on purpose."""
    import importlib
    import pkgutil

    import compat

    modules = {info.name for info in pkgutil.iter_modules(compat.__path__)}
    assert modules == {"django", "httpx", "mcp", "mozilla_django_oidc"}
    for name in modules:
        module = importlib.import_module(f"compat.{name}")
        assert not hasattr(module, "UPSTREAM") and not hasattr(module, "WRITTEN_FOR"), name
        assert "Exit plan" in (module.__doc__ or ""), name
