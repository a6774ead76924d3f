"""``gated``: run a function only with what a human (or a rule) approved, and report it.

As a decorator, the wrapped function is called with the approved payload::

    @gated(client, kind="payment.refund", title=lambda p: f"Refund {p['amount_cents']}",
           editable=["payload.amount_cents"])
    def refund(payload, decision):        # ``decision`` is optional (it carries the grant)
        return stripe_refund(payload["order_id"], payload["amount_cents"])

    refund({"order_id": "10432", "amount_cents": 8400}, idempotency_key="refund-10432")

As a context manager, the body runs only once the action is approved::

    with gated(client, kind=..., title=..., payload=proposed) as gate:
        gate.detail = stripe_refund(**gate.payload, grant=gate.grant)

For reconciliation (docs/reconciliation.md), pass ``gate.action_id`` to the processor as
``metadata={"impri_action_id": gate.action_id}`` and set ``gate.reference`` to the
processor's id (a Stripe refund's ``re_...``): it is reported as ``result.reference``.

Either way: push → wait → run with ``decision.payload`` (never the proposal)
→ report ``executed`` with what the function returned (``gate.detail``), or
``failed`` with the exception, which is then re-raised. A rejection, a request
for changes, expiry or cancellation raises :class:`ActionRejected` /
:class:`ChangesRequested` / :class:`ActionExpired` / :class:`ActionCancelled`
(with ``note`` and ``reason``) and runs nothing.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import inspect
import json
import time
from collections.abc import Callable
from typing import Any

from .client import _TRANSIENT, AsyncImpri, Impri
from .errors import (
    ActionCancelled,
    ActionExpired,
    ActionNotApproved,
    ActionRejected,
    AlreadySettled,
    ChangesRequested,
    DecisionTimeout,
    ResultNotReported,
)
from .types import Action, Decision

__all__ = ["Gate", "gated"]

_NOT_APPROVED = {
    "rejected": ActionRejected,
    "changes_requested": ChangesRequested,
    "expired": ActionExpired,
    "cancelled": ActionCancelled,
}
# Attempts at reporting a result when Impri is briefly unreachable.
REPORT_ATTEMPTS = 4


def outcome(decision: Decision, waited_s: float) -> Decision:
    """The decision if it allows execution; otherwise the exception that says why not."""
    if decision.approved:
        return decision
    if decision.pending:
        raise DecisionTimeout(decision.action_id, waited_s)
    if decision.status in ("executed", "failed"):
        raise AlreadySettled(decision)
    raise _NOT_APPROVED.get(decision.status, ActionNotApproved)(decision)


def result_detail(value: Any) -> Any:
    """What the function returned, as a report ``detail`` (text or a JSON object)."""
    if value is None or isinstance(value, str | dict):
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return str(value)
    return value if isinstance(value, dict) else {"result": value}


def failure_detail(exc: BaseException) -> dict:
    return {"error": type(exc).__name__, "message": str(exc)[:2000]}


class Gate:
    """One gated execution (context manager), or a factory of them (decorator)."""

    def __init__(
        self,
        client: Impri | AsyncImpri,
        *,
        kind: str,
        title: str | Callable[[dict], str],
        preview: Any = None,
        payload: dict | None = None,
        timeout_s: float | None = None,
        **push_fields: Any,
    ):
        self.client = client
        self.kind = kind
        self.title = title
        self.preview = preview
        self.proposed = payload
        self.timeout_s = timeout_s
        self.push_fields = push_fields
        self.action: Action | None = None
        self.decision: Decision | None = None
        self.detail: Any = None
        self.reference: str | None = None  # the processor's id, reported as result.reference
        self.reported: Action | None = None

    # --- What the body of a ``with`` block reads ---------------------------------

    @property
    def payload(self) -> dict:
        """The approved payload: the only thing to execute."""
        if self.decision is None:
            raise RuntimeError("the gate has not been entered")
        return self.decision.payload

    @property
    def grant(self) -> str | None:
        return self.decision.grant if self.decision else None

    @property
    def action_id(self) -> str | None:
        return self.action.action_id if self.action else None

    # --- Building the push ------------------------------------------------------

    def _push_kwargs(self, payload: dict, overrides: dict) -> dict:
        fields = {**self.push_fields, **overrides}
        title = fields.pop("title", self.title)
        preview = fields.pop("preview", self.preview)
        if callable(title):
            title = title(payload)
        if callable(preview):
            preview = preview(payload)
        if preview is None:
            body = json.dumps(payload, indent=2, sort_keys=True, ensure_ascii=False)
            preview = {"format": "json", "body": body}
        return {"kind": self.kind, "title": title, "preview": preview, "payload": payload, **fields}

    def _fresh(self, payload: dict | None, overrides: dict) -> Gate:
        if payload is None:
            raise TypeError("gated needs the proposed payload")
        run = Gate(self.client, kind=self.kind, title=self.title, preview=self.preview,
                   payload=payload, timeout_s=self.timeout_s, **self.push_fields)  # fmt: skip
        run.push_fields = {**self.push_fields, **overrides}
        return run

    # --- Synchronous ------------------------------------------------------------

    def __enter__(self) -> Gate:
        client = self._sync_client()
        self.action = client.push(**self._push_kwargs(self.proposed, {}))
        started = time.monotonic()
        decision = client.await_decision(self.action.action_id, self.timeout_s)
        self.decision = outcome(decision, time.monotonic() - started)
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self.decision is None:
            return
        if exc is None:
            self._report_sync("executed", result_detail(self.detail), self.detail)
        elif isinstance(exc, Exception):
            self._report_sync("failed", failure_detail(exc), None)
        # A BaseException (KeyboardInterrupt, cancellation): the outcome is unknown; report nothing.

    def _report_sync(self, status: str, detail: Any, value: Any) -> None:
        client = self._sync_client()
        for attempt in range(1, REPORT_ATTEMPTS + 1):
            try:
                self.reported = client.report_result(
                    self.decision.action_id,
                    status=status,
                    detail=detail,
                    grant=self.grant,
                    reference=self.reference if status == "executed" else None,
                )
                return
            except _TRANSIENT as exc:
                if attempt == REPORT_ATTEMPTS:
                    raise ResultNotReported(self.decision.action_id, status, value, exc) from exc
                time.sleep(0.5 * 2**attempt)

    def _sync_client(self) -> Impri:
        if not isinstance(self.client, Impri):
            raise TypeError("use `async with gated(...)` with an AsyncImpri client")
        return self.client

    # --- Asynchronous -----------------------------------------------------------

    async def __aenter__(self) -> Gate:
        client = self._async_client()
        self.action = await client.push(**self._push_kwargs(self.proposed, {}))
        started = time.monotonic()
        decision = await client.await_decision(self.action.action_id, self.timeout_s)
        self.decision = outcome(decision, time.monotonic() - started)
        return self

    async def __aexit__(self, exc_type, exc, tb) -> None:
        if self.decision is None:
            return
        if exc is None:
            await self._report_async("executed", result_detail(self.detail), self.detail)
        elif isinstance(exc, Exception):
            await self._report_async("failed", failure_detail(exc), None)

    async def _report_async(self, status: str, detail: Any, value: Any) -> None:
        client = self._async_client()
        for attempt in range(1, REPORT_ATTEMPTS + 1):
            try:
                self.reported = await client.report_result(
                    self.decision.action_id,
                    status=status,
                    detail=detail,
                    grant=self.grant,
                    reference=self.reference if status == "executed" else None,
                )
                return
            except _TRANSIENT as exc:
                if attempt == REPORT_ATTEMPTS:
                    raise ResultNotReported(self.decision.action_id, status, value, exc) from exc
                await asyncio.sleep(0.5 * 2**attempt)

    def _async_client(self) -> AsyncImpri:
        if not isinstance(self.client, AsyncImpri):
            raise TypeError("use `with gated(...)` with a synchronous Impri client")
        return self.client

    # --- Decorator --------------------------------------------------------------

    def __call__(self, fn: Callable) -> Callable:
        """Wrap ``fn(payload[, decision])``; call the wrapper with the proposed payload.

        Keyword arguments of a call (``idempotency_key=``, ``context=``,
        ``title=``…) are added to that call's push.
        """
        wants_decision = "decision" in inspect.signature(fn).parameters

        def arguments(gate: Gate) -> tuple[tuple, dict]:
            return (gate.payload,), ({"decision": gate.decision} if wants_decision else {})

        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def run_async(payload: dict, **overrides: Any) -> Any:
                async with self._fresh(payload, overrides) as gate:
                    args, kwargs = arguments(gate)
                    gate.detail = await fn(*args, **kwargs)
                return gate.detail

            return run_async

        @functools.wraps(fn)
        def run(payload: dict, **overrides: Any) -> Any:
            with self._fresh(payload, overrides) as gate:
                args, kwargs = arguments(gate)
                gate.detail = fn(*args, **kwargs)
            return gate.detail

        return run


def gated(
    client: Impri | AsyncImpri,
    *,
    kind: str,
    title: str | Callable[[dict], str],
    preview: Any = None,
    payload: dict | None = None,
    timeout_s: float | None = None,
    **push_fields: Any,
) -> Gate:
    """Gate a function (decorator) or a block (``with`` / ``async with``) behind Impri.

    ``title`` and ``preview`` may be callables of the proposed payload; without
    a ``preview`` the reviewer sees the payload as JSON. Other keywords
    (``editable``, ``context``, ``flags``, ``target_url``, ``idempotency_key``,
    ``callback_url``, ``expires_in_s``) go to the push. ``timeout_s`` bounds the
    wait (``DecisionTimeout`` if nobody decided by then); ``None`` waits until the
    action is decided or expires.
    """
    return Gate(client, kind=kind, title=title, preview=preview, payload=payload,
                timeout_s=timeout_s, **push_fields)  # fmt: skip
