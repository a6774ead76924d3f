"""Shape actions into the answers that REST and MCP return (same fields in both)."""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass

from django.urls import reverse

from plumbing import public_url

from . import grant_store
from . import money as action_money
from .bounds import edit_bounds
from .digests import payload_sha256
from .models import Action, ActionStatus
from .money import Amount, Money
from .schemas import resolve_path
from .wording import kind_sentence, telling_details


def inbox_url(action: Action, request_origin: str | None = None) -> str:
    return public_url.base_url(request_origin) + reverse("inbox:action", args=[action.pk])


def _preview(action: Action) -> dict:
    return {"format": action.preview_format, "body": action.preview_body}


def unix(moment) -> int | None:
    """The agent-facing timestamp convention: integer Unix seconds (docs/ARCHITECTURE.md,
    "Decisions this layout keeps")."""
    return None if moment is None else int(moment.timestamp())


def _result(action: Action) -> dict | None:
    if not action.result_status:
        return None
    return {
        "status": action.result_status,
        "detail": action.result_detail,
        "reference": action.result_reference or None,
        "reported_at": unix(action.reported_at),
    }


# The one hook of an app above the core into an action's read: the ledger app appends its
# reader here in its AppConfig.ready (the core never imports it). It returns the action's
# ``reconciliation`` ({state, movements}) or None.
RECONCILIATION: list = []


def _reconciliation(action: Action) -> dict | None:
    return RECONCILIATION[0](action) if RECONCILIATION else None


def payload_diff(original: dict, approved: dict) -> str:
    """A unified diff of the pretty-printed payloads, original → approved."""
    before = json.dumps(original, indent=2, sort_keys=True, ensure_ascii=False).splitlines()
    after = json.dumps(approved, indent=2, sort_keys=True, ensure_ascii=False).splitlines()
    return "\n".join(difflib.unified_diff(before, after, "original", "approved", lineterm=""))


def action_out(action: Action, base_url: str, *, reconciliation: bool = False) -> dict:
    """The action as agents and reviewers read it; ``reconciliation``: read what the payment
    processor moved for it (one or two statements: the reads ask, the push, decide and list
    answers don't and carry null)."""
    return {
        "action_id": action.pk,
        "agent": action.agent.name,
        "kind": action.kind,
        "title": action.title,
        "preview": _preview(action),
        "payload": action.payload,
        "original_payload": action.original_payload,
        "context": action.context,
        "target_url": action.target_url or None,
        "payload_sha256": payload_sha256(action.payload),
        "editable": action.editable,
        "edit_bounds": {path: edit_bounds(action, path) for path in action.editable},
        "flags": action.flags,
        "idempotency_key": action.idempotency_key,
        "status": action.effective_status,
        "supersedes": action.supersedes_id,
        "created_at": unix(action.created_at),
        "expires_at": unix(action.expires_at),
        "decision_at": unix(action.decision_at),
        "decided_by": action.decided_by,
        "note": action.note,
        "reason": action.reject_reason or None,
        "edited_by_human": action.edited_by_human,
        "result": _result(action),
        "reconciliation": _reconciliation(action) if reconciliation else None,
        "inbox_url": inbox_url(action, base_url),
    }


def decision_out(action: Action) -> dict:
    """What a waiting agent receives (REST, MCP and webhook bodies alike).

    A decided action's preview is always a diff of what was proposed against
    what was approved: empty when nothing changed, and for rejected, expired
    and cancelled actions. An approval carries its grant: the one stored with the
    decision, the same bytes on every read (``approvals.grant_store``).
    """
    status = action.effective_status
    preview = _preview(action)
    if status != ActionStatus.PENDING:
        body = payload_diff(action.original_payload, action.payload) if action.was_approved else ""
        preview = {"format": "diff", "body": body}
    grant = grant_store.grant_for(action)
    return {
        "action_id": action.pk,
        "status": status,
        "decision_at": unix(action.decision_at),
        "payload": action.payload,
        "preview": preview,
        "edited_by_human": action.edited_by_human,
        "decided_by": action.decided_by,
        "note": action.note,
        "reason": action.reject_reason or None,
        "payload_sha256": payload_sha256(action.payload) if grant else None,
        "grant": grant,
    }


# --- What will happen, as the inbox, Slack and a push say it --------------------------


def sign_word(money: Money | None) -> str:
    """``negative`` or ``zero`` for an amount that is not above zero (shown in red); else ""."""
    if money is None or money.minor > 0:
        return ""
    return "negative" if money.minor < 0 else "zero"


# --- What will happen -------------------------------------------------------------------------


@dataclass
class Outcome:
    verb: str
    money: Money | None
    order: str | None
    target_url: str
    # Without money: the payload's telling fields, as (label, value), e.g. ("to", "a@b.example").
    details: tuple[tuple[str, str], ...] = ()
    money_path: str = ""  # where the amount is (the approve button follows an edit of it)

    @property
    def sign(self) -> str:
        return sign_word(self.money)


def outcome(action: Action) -> Outcome:
    """The payload as a sentence: ``Refund $84.00 USD · order 10432``; without money, ``approvals.wording``."""
    payload = action.payload if isinstance(action.payload, dict) else {}
    money = action_money.primary(action)
    order = payload.get("order_id")
    if money is not None:
        verb = action.kind.rsplit(".", 1)[-1].replace("_", " ").replace("-", " ").capitalize()
        details: tuple[tuple[str, str], ...] = ()
    else:
        verb = kind_sentence(action.kind)
        details = telling_details(payload)
    return Outcome(
        verb=verb,
        money=money,
        money_path=action_money.primary_path(action) if money is not None else "",
        order=str(order) if isinstance(order, str | int) and not isinstance(order, bool) else None,
        target_url=action.target_url,
        details=details,
    )


# --- Money at a path ------------------------------------------------------------------


def amounts_by_path(action: Action) -> dict[str, Amount]:
    return {a.path: a for a in action_money.amounts(action)}


def money_for_path(action: Action, path: str, value, found: dict | None = None) -> Money | None:
    """A whole number at one of the action's money paths, read as money in that amount's currency."""
    amount = (found if found is not None else amounts_by_path(action)).get(path)
    if amount is None or not isinstance(value, int) or isinstance(value, bool):
        return None
    spec = action_money.spec_at(action, path)
    if spec is not None and not spec.minor_units:
        return None  # the value is in major units: shown as it is
    return Money(value, amount.currency)


# --- Edit bounds ----------------------------------------------------------------------------------


@dataclass
class Bound:
    name: str
    value: object
    money: Money | None
    is_original: bool


def bounds(action: Action, path: str) -> list[Bound]:
    """The rule's bounds on ``path`` (``{"min": 1, "max": "original"}``) with ``original`` resolved."""
    spec = edit_bounds(action, path)
    if not isinstance(spec, dict):
        return []
    _, original = resolve_path({"payload": action.original_payload}, path)
    out = []
    for name, raw in spec.items():
        is_original = raw == "original"
        value = original if is_original else raw
        out.append(Bound(name, value, money_for_path(action, path, value), is_original))
    return out
