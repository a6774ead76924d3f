"""Shape actions into the answers that REST and MCP return (same fields in both)."""

from __future__ import annotations

import difflib
import json

from django.conf import settings
from django.urls import reverse

from .models import Action, ActionStatus


def inbox_url(action: Action, base_url: str) -> str:
    base = settings.IMPRI_BASE_URL or base_url.rstrip("/")
    return base + reverse("inbox:action", args=[action.pk])


def _preview(action: Action) -> dict:
    return {"format": action.preview_format, "body": action.preview_body}


def _result(action: Action) -> dict | None:
    if not action.result_status:
        return None
    return {
        "status": action.result_status,
        "detail": action.result_detail,
        "reported_at": action.reported_at,
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
        "created_at": action.created_at,
        "expires_at": action.expires_at,
        "decision_at": action.decision_at,
        "decided_by": action.decided_by,
        "note": action.note,
        "edited_by_human": action.edited_by_human,
        "result": _result(action),
        "inbox_url": inbox_url(action, base_url),
    }


def decision_out(action: Action) -> dict:
    """What a waiting agent receives. When a human edited the payload, the preview is the diff."""
    status = action.effective_status
    preview = _preview(action)
    if action.edited_by_human and status in (
        ActionStatus.APPROVED,
        ActionStatus.EXECUTED,
        ActionStatus.FAILED,
    ):
        preview = {"format": "diff", "body": payload_diff(action.original_payload, action.payload)}
    return {
        "action_id": action.pk,
        "status": status,
        "decision_at": action.decision_at,
        "payload": action.payload,
        "preview": preview,
        "edited_by_human": action.edited_by_human,
        "decided_by": action.decided_by,
        "note": action.note,
    }
