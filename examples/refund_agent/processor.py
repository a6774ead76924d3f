"""A stand-in payment processor that moves no money without a valid Impri grant.

It plays the part of the system an agent must not be trusted with: a real
processor (or the small service in front of it) would run the same checks.
A refund request is ``POST /v1/refunds`` with ``{"action_id", "payload",
"grant"}``; it is honoured only if

1. a grant is present (an unapproved action has none),
2. the grant's Ed25519 signature verifies with Impri's published key
   (``/.well-known/jwks.json``; fetched again when a new key id appears),
3. it has not expired,
4. it was issued for exactly this payload (an altered amount is refused)
   and this action,
5. its ``jti`` was never honoured before (a replay is refused).

It listens on 127.0.0.1 only.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from impri_client import InvalidGrant, verify_grant


class Refused(Exception):
    def __init__(self, code: str, detail: str):
        self.code = code
        self.detail = detail
        super().__init__(f"{code}: {detail}")


class Processor:
    """The ledger and the checks; ``serve()`` puts it on a loopback port."""

    def __init__(self, jwks: Callable[[bool], dict], clock: Callable[[], float] = time.time):
        self._jwks = jwks  # jwks(refresh) -> {"keys": [...]}
        self.clock = clock
        self.refunds: list[dict] = []
        self.refusals: list[dict] = []
        self.honoured_grants: dict[str, str] = {}  # action id -> the grant that paid it
        self._honoured: dict[str, float] = {}  # jti -> exp, kept until it expires
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    def refund(self, action_id: str, payload: dict, grant: str | None) -> dict:
        try:
            return self._refund(action_id, payload, grant)
        except Refused as refused:
            self.refusals.append({"action_id": action_id, "code": refused.code, "payload": payload})
            raise

    def _refund(self, action_id: str, payload: dict, grant: str | None) -> dict:
        if not grant:
            raise Refused("no_grant", "no grant: this refund was not approved in Impri")
        claims = self._verify(grant, payload, action_id)
        now = self.clock()
        with self._lock:
            self._honoured = {jti: exp for jti, exp in self._honoured.items() if exp > now}
            if claims.jti in self._honoured:
                raise Refused("reused", "this grant was already used for a refund")
            self._honoured[claims.jti] = claims.expires_at.timestamp()
            refund = {
                "refund_id": "re_" + secrets.token_hex(6),
                "order_id": payload["order_id"],
                "amount_cents": payload["amount_cents"],
                "currency": payload.get("currency", "USD"),
                "action_id": action_id,
            }
            # The ledger keeps the authorisation beside the refund, for the auditors.
            self.refunds.append({**refund, "grant_jti": claims.jti})
            self.honoured_grants[action_id] = grant
        return refund

    def _verify(self, grant: str, payload: dict, action_id: str):
        checks = {"action_id": action_id, "now": self.clock()}
        try:
            try:
                return verify_grant(grant, payload, jwks=self._jwks(False), **checks)
            except InvalidGrant as exc:
                if exc.code != "unknown_key":
                    raise
                return verify_grant(grant, payload, jwks=self._jwks(True), **checks)
        except InvalidGrant as exc:
            raise Refused(exc.code, str(exc)) from None

    # --- HTTP -----------------------------------------------------------------

    def serve(self, port: int = 0) -> str:
        """Start listening on 127.0.0.1; answers the base URL."""
        self._server = ThreadingHTTPServer(("127.0.0.1", port), _handler(self))
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def close(self) -> None:
        if self._server:
            self._server.shutdown()
            self._server.server_close()


def _handler(processor: Processor):
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            if self.path != "/v1/refunds":
                return self._answer(404, {"error": "not_found"})
            try:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
                action_id, payload = body["action_id"], body["payload"]
            except (ValueError, KeyError, TypeError):
                return self._answer(400, {"error": "bad_request"})
            try:
                refund = processor.refund(action_id, payload, body.get("grant"))
            except Refused as refused:
                return self._answer(403, {"error": refused.code, "detail": refused.detail})
            return self._answer(201, refund)

        def _answer(self, status: int, body: dict) -> None:
            raw = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def log_message(self, *args):
            pass

    return Handler


def impri_jwks(impri) -> Callable[[bool], dict]:
    """Impri's published keys through a client (cached; refetched on request)."""
    return lambda refresh: impri.jwks(refresh=refresh)
