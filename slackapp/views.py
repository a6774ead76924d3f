"""``POST /integrations/slack/interactivity``: Slack's button clicks and modal submissions.

Only requests Slack signed with ``IMPRI_SLACK_SIGNING_SECRET`` are read
(slack_sdk's ``SignatureVerifier``: ``v0`` HMAC-SHA256 of ``v0:{timestamp}:{body}``,
timestamp within 5 minutes, constant-time compare); anything else is 401. A
signed request that names no action, or arrives with no bot token set, decides
nothing and answers 200 (Slack retries anything else). Buttons (``action_id``
``approve``, ``reject``, ``edit``; ``value`` = the action id) and the edit
modal are parsed here and decided by ``slackapp.decisions``.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.signature import SignatureVerifier

from approvals.models import Action
from approvals.schemas import resolve_path
from plumbing import strict_json

from . import blocks, decisions
from .delivery import INLINE_TIMEOUT_S, web_client

logger = logging.getLogger(__name__)

DECISIONS = ("approve", "reject", "edit")


class BadPayload(Exception):
    def __init__(self, field: str, problem: str):
        super().__init__(f"{field}: {problem}")


def signed(request: HttpRequest) -> bool:
    secret = settings.IMPRI_SLACK_SIGNING_SECRET
    if not secret:
        return False
    try:
        return SignatureVerifier(secret).is_valid(
            body=request.body,
            timestamp=request.headers.get("X-Slack-Request-Timestamp"),
            signature=request.headers.get("X-Slack-Signature"),
        )
    except ValueError:  # a timestamp that is not a number
        return False


@csrf_exempt
@require_POST
def interactivity(request: HttpRequest) -> HttpResponse:
    if not signed(request):
        return JsonResponse(
            {
                "detail": "X-Slack-Signature: not a valid Slack signature for this request, or the "
                "request is older than 5 minutes"
            },
            status=401,
        )
    try:
        payload = strict_json.loads(request.POST.get("payload") or "")
        if not isinstance(payload, dict):
            raise ValueError
    except strict_json.Refused as exc:
        return JsonResponse({"detail": f"payload: {exc}"}, status=422)
    except ValueError:
        return JsonResponse(
            {"detail": "payload: must be Slack's JSON interaction payload"}, status=400
        )
    client = web_client(INLINE_TIMEOUT_S)
    if client is None:
        return HttpResponse(status=200)  # no bot token: Slack decides nothing
    try:
        if payload.get("type") == "block_actions":
            return block_action(payload, client)
        if payload.get("type") == "view_submission":
            return view_submission(payload, client)
    except BadPayload as exc:
        return JsonResponse({"detail": str(exc)}, status=400)
    return HttpResponse(status=200)


def dig(value, *keys):
    """``value[k1][k2]…``, or None as soon as a level is not an object (signed, yet not trusted)."""
    for key in keys:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


def _text(value, field: str) -> str:
    if not isinstance(value, str):
        raise BadPayload(field, "must be a string")
    return value


def block_action(payload: dict, client: WebClient) -> HttpResponse:
    actions = payload.get("actions")
    if not isinstance(actions, list) or not actions or not isinstance(actions[0], dict):
        raise BadPayload("actions", "must be a list of the clicked elements")
    clicked = actions[0]
    if clicked.get("action_id") not in DECISIONS:
        return HttpResponse(status=200)  # "Open in Impri" and anything else: nothing to do
    action_id = _text(clicked.get("value"), "actions[0].value")
    user_id = _text(dig(payload, "user", "id"), "user.id")
    channel = dig(payload, "channel", "id") or dig(payload, "container", "channel_id")
    channel = channel if isinstance(channel, str) else None
    block_id = clicked.get("block_id")
    block_id = block_id if isinstance(block_id, str) else ""
    seen = (
        block_id.removeprefix(blocks.DECIDE_BLOCK)
        if block_id.startswith(blocks.DECIDE_BLOCK)
        else None
    )
    if clicked["action_id"] == "edit":
        outcome = open_edit(payload, client, action_id, user_id, channel)
    else:
        outcome = decisions.decide(
            action_id, user_id, client, verdict=clicked["action_id"], seen_sha256=seen
        )
    if outcome.text:
        ephemeral(client, channel, user_id, outcome.mrkdwn())
    return HttpResponse(status=200)


def open_edit(payload: dict, client: WebClient, action_id: str, user_id: str, channel):
    action = Action.objects.select_related("agent").filter(pk=action_id).first()
    user = decisions.reviewer_for(user_id, client) if action is not None else None
    problem = decisions.check(action, user, "approve")
    if problem is not None:
        return problem
    if action.is_settled:
        return decisions.too_late(action.pk)
    trigger = _text(payload.get("trigger_id"), "trigger_id")
    try:
        client.views_open(trigger_id=trigger, view=blocks.edit_modal(action, channel or ""))
    except Exception as exc:  # Slack refused or is away: say so, decide nothing
        error = exc.response.get("error") if isinstance(exc, SlackApiError) else exc
        logger.warning("slack: views.open failed: %s", error)
        return decisions.refused(action, "Slack would not open the edit form.")
    return decisions.Outcome(False)


def ephemeral(client: WebClient, channel, user_id: str, text: str) -> None:
    """A message only the clicking member sees; a failure is logged, never raised."""
    if not channel:
        return
    try:
        client.chat_postEphemeral(channel=channel, user=user_id, text=text)
    except Exception as exc:  # Slack away or refusing: the click still got its answer
        logger.warning("slack: chat.postEphemeral failed: %s", exc)


# --- The edit modal ------------------------------------------------------------------------


def view_submission(payload: dict, client: WebClient) -> HttpResponse:
    if dig(payload, "view", "callback_id") != blocks.EDIT_CALLBACK:
        return HttpResponse(status=200)
    try:
        meta = strict_json.loads(dig(payload, "view", "private_metadata") or "")
        action_id, seen, channel = (meta.get(k) for k in ("a", "s", "c"))
        if not all(isinstance(v, str) for v in (action_id, seen, channel)):
            raise ValueError
    except (ValueError, TypeError, AttributeError):
        raise BadPayload("view.private_metadata", "is not the edit form's") from None
    user_id = _text(dig(payload, "user", "id"), "user.id")
    action = Action.objects.filter(pk=action_id).first()
    if action is None:
        return HttpResponse(status=200)
    values = dig(payload, "view", "state", "values")
    values = values if isinstance(values, dict) else {}
    edits, errors = read_edits(action, values)
    if errors:
        return JsonResponse({"response_action": "errors", "errors": errors})
    note = _field(values, blocks.NOTE_BLOCK) or ""
    outcome = decisions.decide(
        action.pk, user_id, client, verdict="approve", seen_sha256=seen, edits=edits, note=note
    )
    if outcome.decided:
        if outcome.text:
            ephemeral(client, channel, user_id, outcome.mrkdwn())
        return HttpResponse(status=200)  # closes the modal; the message updates itself
    block = blocks.NOTE_BLOCK
    for index, path in enumerate(action.editable):
        if path == outcome.field or (not outcome.field and index == 0):
            block = f"edit-{index}"
            break
    return JsonResponse({"response_action": "errors", "errors": {block: outcome.plain()[:1900]}})


def _field(values: dict, block: str):
    value = dig(values, block, "value", "value")
    return value if isinstance(value, str) else None


def read_edits(action: Action, values: dict) -> tuple[dict, dict]:
    """The changed fields typed like the agent's values, or the modal's per-field errors."""
    edits, errors = {}, {}
    for index, path in enumerate(action.editable):
        block = f"edit-{index}"
        raw = _field(values, block)
        if raw is None:
            continue
        _, original = resolve_path({"payload": action.original_payload}, path)
        _, current = resolve_path({"payload": action.payload}, path)
        try:
            value = typed(original, raw)
        except ValueError as exc:
            errors[block] = str(exc)
            continue
        if value != current:
            edits[path] = value
    return edits, errors


def typed(original, raw: str):
    if isinstance(original, str):
        return raw
    raw = raw.strip()
    if isinstance(original, bool):
        if raw.lower() not in ("true", "false"):
            raise ValueError("must be true or false")
        return raw.lower() == "true"
    if isinstance(original, int):
        try:
            return int(raw)
        except ValueError:
            raise ValueError("must be a whole number") from None
    if isinstance(original, float):
        try:
            return float(raw)
        except ValueError:
            raise ValueError("must be a number") from None
    try:
        return strict_json.loads(raw)
    except strict_json.Refused as exc:
        raise ValueError(f"must be JSON that reads one way: {exc}") from None
    except ValueError:
        raise ValueError("must be JSON, like the agent's value") from None
