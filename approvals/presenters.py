"""Shape actions into the answers that REST and MCP return (same fields in both)."""

from __future__ import annotations

import difflib
import json

from django.urls import reverse

from plumbing import public_url

from . import grants
from .models import Action, ActionStatus


def inbox_url(action: Action, request_origin: str | None = None) -> str:
    return public_url.base_url(request_origin) + reverse("inbox:action", args=[action.pk])


def _preview(action: Action) -> dict:
    return {"format": action.preview_format, "body": action.preview_body}


def unix(moment) -> int | None:
    """The agent-facing timestamp convention: integer Unix seconds (DESIGN §4)."""
    return None if moment is None else int(moment.timestamp())


def _result(action: Action) -> dict | None:
    if not action.result_status:
        return None
    return {
        "status": action.result_status,
        "detail": action.result_detail,
        "reported_at": unix(action.reported_at),
    }


def payload_diff(original: dict, approved: dict) -> str:
    """A unified diff of the pretty-printed payloads, original → approved."""
    before = json.dumps(original, indent=2, sort_keys=True, ensure_ascii=False).splitlines()
    after = json.dumps(approved, indent=2, sort_keys=True, ensure_ascii=False).splitlines()
    return "\n".join(difflib.unified_diff(before, after, "original", "approved", lineterm=""))


def action_out(action: Action, base_url: str) -> dict:
    from .services import edit_bounds, payload_sha256  # services → outbox → here: not at import

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
        "inbox_url": inbox_url(action, base_url),
    }


def decision_out(action: Action) -> dict:
    """What a waiting agent receives (REST, MCP and webhook bodies alike).

    A decided action's preview is always a diff of what was proposed against
    what was approved: empty when nothing changed, and for rejected, expired
    and cancelled actions. An approval carries its grant (``approvals.grants``).
    """
    status = action.effective_status
    preview = _preview(action)
    if status != ActionStatus.PENDING:
        body = payload_diff(action.original_payload, action.payload) if action.was_approved else ""
        preview = {"format": "diff", "body": body}
    claims = grants.claims_for(action)
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
        "payload_sha256": claims["payload_sha256"] if claims else None,
        "grant": grants.sign(claims) if claims else None,
    }
