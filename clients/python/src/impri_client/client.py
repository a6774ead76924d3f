"""``Impri`` and ``AsyncImpri``: the REST API at ``{base_url}/api/v1``, typed.

Both build the same requests (``_Requests``) and differ only in how they send
them. Keyword arguments are named like the REST fields (docs/api.md).
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass
from typing import Any

import httpx

from . import grants
from .errors import RateLimited, ServiceUnavailable, error_for
from .types import Action, Decision, Preview

__all__ = ["AsyncImpri", "Impri"]

VERSION = "0.1.0"
# One long-poll call waits at most this long: proxies (nginx, ALB) close idle
# connections at 60 s, and a pending answer just means "call again".
DEFAULT_POLL_S = 50.0
# How many failed long-poll calls in a row (connection refused, 503 while a
# server restarts) the wait rides out, with backoff, before it gives up.
DEFAULT_WAIT_RETRIES = 8
# Errors worth retrying during a wait: nothing changed on the server.
_TRANSIENT = (httpx.TransportError, ServiceUnavailable, RateLimited)


@dataclass
class _Call:
    method: str
    path: str
    params: dict | None = None
    json: Any = None
    headers: dict | None = None
    read_s: float | None = None
    auth: bool = True


class _Requests:
    """Builds every request and reads every answer; no I/O here."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        timeout: float = 30.0,
        poll_s: float = DEFAULT_POLL_S,
        wait_retries: int = DEFAULT_WAIT_RETRIES,
    ):
        key = api_key or os.environ.get("IMPRI_API_KEY")
        if not key:
            raise ValueError("an API key is needed: pass api_key= or set IMPRI_API_KEY")
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must be http(s)://host[:port], got {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.poll_s = poll_s
        self.wait_retries = wait_retries
        self._headers = {
            "Authorization": f"Bearer {key}",
            "Accept": "application/json",
            "User-Agent": f"impri-client-python/{VERSION}",
        }
        self._jwks: dict | None = None

    def _url(self, call: _Call) -> str:
        return self.base_url + call.path

    def _request_kwargs(self, call: _Call) -> dict:
        headers = dict(self._headers) if call.auth else {"Accept": "application/json"}
        headers.update(call.headers or {})
        read = call.read_s if call.read_s is not None else self.timeout
        return {
            "params": call.params,
            "json": call.json,
            "headers": headers,
            "timeout": httpx.Timeout(self.timeout, read=read),
        }

    @staticmethod
    def _read(response: httpx.Response) -> Any:
        try:
            body = response.json()
        except ValueError:
            body = {"detail": response.text[:500] or response.reason_phrase}
        if response.status_code >= 400:
            raise error_for(response.status_code, body)
        return body

    # --- Request builders --------------------------------------------------------

    @staticmethod
    def _push(
        *,
        kind: str,
        title: str,
        preview: Preview | dict | str,
        payload: dict,
        idempotency_key: str | None,
        **fields: Any,
    ) -> _Call:
        if isinstance(preview, Preview):
            preview = preview.to_json()
        elif isinstance(preview, str):
            preview = {"format": "plain", "body": preview}
        body = {"kind": kind, "title": title, "preview": preview, "payload": payload}
        # Only what was given: an older server refuses fields it doesn't know.
        body.update({name: value for name, value in fields.items() if value is not None})
        if idempotency_key:
            body["idempotency_key"] = idempotency_key
        return _Call("POST", "/api/v1/actions", json=body)

    def _decision(self, action_id: str, wait_s: float) -> _Call:
        return _Call(
            "GET",
            f"/api/v1/actions/{_segment(action_id)}/decision",
            params={"timeout_s": _seconds(wait_s)},
            read_s=wait_s + 30,  # the server answers pending at timeout_s; allow for the trip
        )

    @staticmethod
    def _report(
        action_id: str, status: str, detail: Any, grant: str | None, reference: str | None = None
    ) -> _Call:
        body: dict[str, Any] = {"status": status, "detail": detail}
        if grant:
            body["grant"] = grant
        if reference:
            body["reference"] = reference
        return _Call("POST", f"/api/v1/actions/{_segment(action_id)}/result", json=body)

    @staticmethod
    def _get(action_id: str) -> _Call:
        return _Call("GET", f"/api/v1/actions/{_segment(action_id)}")

    @staticmethod
    def _cancel(action_id: str, reason: str) -> _Call:
        return _Call(
            "POST", f"/api/v1/actions/{_segment(action_id)}/cancel", json={"reason": reason}
        )

    @staticmethod
    def _list(**filters: Any) -> _Call:
        params = {name: value for name, value in filters.items() if value is not None}
        return _Call("GET", "/api/v1/actions", params=params)

    @staticmethod
    def _jwks_call() -> _Call:
        return _Call("GET", "/.well-known/jwks.json", auth=False)

    # --- Waiting -----------------------------------------------------------------

    def _next_wait(self, deadline: float | None) -> float:
        if deadline is None:
            return self.poll_s
        return max(0.0, min(self.poll_s, deadline - time.monotonic()))

    def _give_up(self, failures: int, deadline: float | None) -> bool:
        out_of_time = deadline is not None and time.monotonic() >= deadline
        return out_of_time or failures > self.wait_retries

    @staticmethod
    def _backoff(failures: int) -> float:
        return min(0.25 * 2**failures, 10.0)


def _segment(action_id: str) -> str:
    if not action_id or "/" in action_id or action_id in (".", ".."):
        raise ValueError(f"not an action id: {action_id!r}")
    return action_id


def _seconds(value: float) -> int | float:
    return int(value) if float(value).is_integer() else round(value, 3)


PUSH_DOC = """Propose an action; answers the action as Impri holds it (usually ``pending``).

Fields are the REST fields: ``kind`` (dotted, e.g. ``payment.refund``),
``title`` (one line), ``preview`` (``{"format", "body"}``, a ``Preview`` or
plain text), ``payload`` (exactly what will run once approved), and
optionally ``target_url``, ``editable`` (dotted paths like
``payload.amount_cents`` a reviewer may change), ``flags``, ``context``,
``idempotency_key`` (a retry with the same key and body returns the same
action), ``callback_url``, ``expires_in_s``. Unknown extra keywords are sent
as they are.
"""

AWAIT_DOC = """Wait for the decision, calling again while Impri answers ``pending``.

With ``timeout_s=None`` it waits until the action is decided (or expires at
its ``expires_at``); with a number it returns the ``pending`` decision once
that many seconds have passed. Brief outages (connection refused, 503, 429)
are ridden out with backoff. The answer's ``payload`` is what to execute.
"""


class Impri(_Requests):
    """Synchronous client. ``Impri("http://localhost:8000", api_key)``; a context manager."""

    def __init__(self, base_url: str, api_key: str | None = None, **options: Any):
        http_client = options.pop("http_client", None)
        super().__init__(base_url, api_key, **options)
        self._http = http_client or httpx.Client()

    def __enter__(self) -> Impri:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _send(self, call: _Call) -> Any:
        response = self._http.request(call.method, self._url(call), **self._request_kwargs(call))
        return self._read(response)

    def push(
        self,
        *,
        kind: str,
        title: str,
        preview: Preview | dict | str,
        payload: dict,
        editable: list[str] | None = None,
        target_url: str | None = None,
        flags: list[str] | None = None,
        context: dict | None = None,
        idempotency_key: str | None = None,
        callback_url: str | None = None,
        expires_in_s: int | None = None,
        **extra: Any,
    ) -> Action:
        call = self._push(
            kind=kind,
            title=title,
            preview=preview,
            payload=payload,
            idempotency_key=idempotency_key,
            editable=editable,
            target_url=target_url,
            flags=flags,
            context=context,
            callback_url=callback_url,
            expires_in_s=expires_in_s,
            **extra,
        )
        return Action.from_json(self._send(call))

    push.__doc__ = PUSH_DOC

    def await_decision(self, action_id: str, timeout_s: float | None = None) -> Decision:
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        failures = 0
        while True:
            wait = self._next_wait(deadline)
            started = time.monotonic()
            try:
                decision = Decision.from_json(self._send(self._decision(action_id, wait)))
            except _TRANSIENT:
                failures += 1
                if self._give_up(failures, deadline):
                    raise
                time.sleep(self._backoff(failures))
                continue
            failures = 0
            if not decision.pending or self._give_up(0, deadline):
                return decision
            if time.monotonic() - started < min(wait, 1.0):
                time.sleep(0.5)  # answered pending early (a server shutting down): don't spin

    await_decision.__doc__ = AWAIT_DOC

    def report_result(
        self,
        action_id: str,
        *,
        status: str,
        detail: Any = None,
        grant: str | None = None,
        reference: str | None = None,
    ) -> Action:
        """Report ``executed`` or ``failed`` with ``detail`` (text or an object); same again is a no-op.

        ``reference``: the processor's id for what was executed (a Stripe refund ``re_...``),
        which reconciliation matches the money that moved by (docs/reconciliation.md).
        """
        return Action.from_json(
            self._send(self._report(action_id, status, detail, grant, reference))
        )

    def get(self, action_id: str) -> Action:
        return Action.from_json(self._send(self._get(action_id)))

    def cancel(self, action_id: str, *, reason: str = "") -> Action:
        """Withdraw a pending action (409 ``Conflict`` once it was decided)."""
        return Action.from_json(self._send(self._cancel(action_id, reason)))

    def list_actions(self, **filters: Any) -> tuple[list[Action], str | None]:
        """One page: ``status``, ``kind``, ``cursor``, ``limit``; answers (actions, next_cursor)."""
        page = self._send(self._list(**filters))
        return [Action.from_json(item) for item in page["items"]], page.get("next_cursor")

    def jwks(self, *, refresh: bool = False) -> dict:
        """The server's grant-signing public keys (``/.well-known/jwks.json``), cached."""
        if self._jwks is None or refresh:
            self._jwks = self._send(self._jwks_call())
        return self._jwks

    def verify_grant(self, grant: str, payload: Any, **checks: Any) -> grants.GrantClaims:
        """``verify_grant`` with this server's keys, fetched once more if the key id is new."""
        try:
            return grants.verify_grant(grant, payload, jwks=self.jwks(), **checks)
        except grants.InvalidGrant as exc:
            if exc.code != "unknown_key":
                raise
        return grants.verify_grant(grant, payload, jwks=self.jwks(refresh=True), **checks)


class AsyncImpri(_Requests):
    """Asynchronous client with the same methods as ``Impri``, awaited."""

    def __init__(self, base_url: str, api_key: str | None = None, **options: Any):
        http_client = options.pop("http_client", None)
        super().__init__(base_url, api_key, **options)
        self._http = http_client or httpx.AsyncClient()

    async def __aenter__(self) -> AsyncImpri:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _send(self, call: _Call) -> Any:
        kwargs = self._request_kwargs(call)
        response = await self._http.request(call.method, self._url(call), **kwargs)
        return self._read(response)

    async def push(
        self,
        *,
        kind: str,
        title: str,
        preview: Preview | dict | str,
        payload: dict,
        editable: list[str] | None = None,
        target_url: str | None = None,
        flags: list[str] | None = None,
        context: dict | None = None,
        idempotency_key: str | None = None,
        callback_url: str | None = None,
        expires_in_s: int | None = None,
        **extra: Any,
    ) -> Action:
        call = self._push(
            kind=kind,
            title=title,
            preview=preview,
            payload=payload,
            idempotency_key=idempotency_key,
            editable=editable,
            target_url=target_url,
            flags=flags,
            context=context,
            callback_url=callback_url,
            expires_in_s=expires_in_s,
            **extra,
        )
        return Action.from_json(await self._send(call))

    push.__doc__ = PUSH_DOC

    async def await_decision(self, action_id: str, timeout_s: float | None = None) -> Decision:
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        failures = 0
        while True:
            wait = self._next_wait(deadline)
            started = time.monotonic()
            try:
                decision = Decision.from_json(await self._send(self._decision(action_id, wait)))
            except _TRANSIENT:
                failures += 1
                if self._give_up(failures, deadline):
                    raise
                await asyncio.sleep(self._backoff(failures))
                continue
            failures = 0
            if not decision.pending or self._give_up(0, deadline):
                return decision
            if time.monotonic() - started < min(wait, 1.0):
                await asyncio.sleep(0.5)

    await_decision.__doc__ = AWAIT_DOC

    async def report_result(
        self,
        action_id: str,
        *,
        status: str,
        detail: Any = None,
        grant: str | None = None,
        reference: str | None = None,
    ) -> Action:
        return Action.from_json(
            await self._send(self._report(action_id, status, detail, grant, reference))
        )

    async def get(self, action_id: str) -> Action:
        return Action.from_json(await self._send(self._get(action_id)))

    async def cancel(self, action_id: str, *, reason: str = "") -> Action:
        return Action.from_json(await self._send(self._cancel(action_id, reason)))

    async def list_actions(self, **filters: Any) -> tuple[list[Action], str | None]:
        page = await self._send(self._list(**filters))
        return [Action.from_json(item) for item in page["items"]], page.get("next_cursor")

    async def jwks(self, *, refresh: bool = False) -> dict:
        if self._jwks is None or refresh:
            self._jwks = await self._send(self._jwks_call())
        return self._jwks

    async def verify_grant(self, grant: str, payload: Any, **checks: Any) -> grants.GrantClaims:
        try:
            return grants.verify_grant(grant, payload, jwks=await self.jwks(), **checks)
        except grants.InvalidGrant as exc:
            if exc.code != "unknown_key":
                raise
        return grants.verify_grant(grant, payload, jwks=await self.jwks(refresh=True), **checks)
