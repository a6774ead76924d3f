"""A stand-in for Slack's Web API on 127.0.0.1: records every call and answers like Slack.

Impri's slack_sdk client is pointed at it with ``IMPRI_SLACK_API_URL``. It knows
``users.info`` (members in ``users``), ``chat.postMessage``, ``chat.update``,
``chat.postEphemeral`` and ``views.open``; ``errors`` makes a method answer
``{"ok": false, "error": …}``. Also signs interaction payloads as Slack does.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, urlencode, urlsplit


@dataclass
class Call:
    method: str
    params: dict
    authorization: str


class FakeSlack:
    def __init__(self):
        self.calls: list[Call] = []
        self.users: dict[str, dict] = {}
        self.errors: dict[str, str] = {}
        self.lock = threading.Condition()
        self.posted = 0
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/api/"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def member(self, user_id: str, email: str, confirmed: bool = True, **extra) -> None:
        self.users[user_id] = {
            "id": user_id,
            "deleted": False,
            "is_bot": False,
            "is_email_confirmed": confirmed,
            "profile": {"email": email, "real_name": user_id},
            **extra,
        }

    def to(self, method: str) -> list[dict]:
        with self.lock:
            return [c.params for c in self.calls if c.method == method]

    def wait_for(self, method: str, count: int = 1, timeout: float = 30) -> list[dict]:
        with self.lock:
            if not self.lock.wait_for(lambda: len(self.to(method)) >= count, timeout):
                raise AssertionError(f"expected {count} {method} calls, got {self.to(method)}")
            return self.to(method)

    def answer(self, method: str, params: dict) -> dict:
        if method in self.errors:
            return {"ok": False, "error": self.errors[method]}
        if method == "users.info":
            user = self.users.get(params.get("user"))
            return {"ok": True, "user": user} if user else {"ok": False, "error": "user_not_found"}
        if method == "chat.postMessage":
            self.posted += 1
            ts = f"1700000000.{self.posted:06d}"
            return {"ok": True, "channel": params.get("channel"), "ts": ts, "message": {"ts": ts}}
        if method == "chat.update":
            return {"ok": True, "channel": params.get("channel"), "ts": params.get("ts")}
        if method == "chat.postEphemeral":
            return {"ok": True, "message_ts": "1700000001.000001"}
        if method == "views.open":
            return {"ok": True, "view": {"id": "V0EDIT"}}
        return {"ok": False, "error": "unknown_method"}

    def _handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _serve(self):
                parts = urlsplit(self.path)
                method = parts.path.removeprefix("/api/")
                params = dict(parse_qsl(parts.query))
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else b""
                if body:
                    if "json" in (self.headers.get("content-type") or ""):
                        params.update(json.loads(body))
                    else:
                        params.update(dict(parse_qsl(body.decode())))
                for key in ("blocks", "view"):  # form-encoded values arrive as JSON text
                    if isinstance(params.get(key), str):
                        params[key] = json.loads(params[key])
                with fake.lock:
                    fake.calls.append(Call(method, params, self.headers.get("authorization", "")))
                    answer = fake.answer(method, params)
                    fake.lock.notify_all()
                data = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json; charset=utf-8")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = _serve  # noqa: N815
            do_POST = _serve  # noqa: N815

        return Handler


def sign(secret: str, body: str, timestamp: int | None = None) -> dict:
    """Slack's request signature headers for ``body`` (v0 HMAC-SHA256 of ``v0:{ts}:{body}``)."""
    ts = str(int(time.time()) if timestamp is None else timestamp)
    digest = hmac.new(secret.encode(), f"v0:{ts}:{body}".encode(), hashlib.sha256).hexdigest()
    return {"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": f"v0={digest}"}


def form(payload: dict) -> str:
    return urlencode({"payload": json.dumps(payload)})
