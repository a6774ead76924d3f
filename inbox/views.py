"""Reviewer pages. Read-only until the inbox issue adds deciding here."""

from __future__ import annotations

import json

from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import redirect, render

from approvals import services
from approvals.errors import ActionNotFound
from approvals.models import Action, ActionStatus
from audit.models import AuditEvent


def home(request):
    return redirect("inbox:queue")


@login_required
def queue(request):
    actions = (
        Action.objects.visible_to_reviewer(request.user)
        .with_effective_status(ActionStatus.PENDING)
        .select_related("agent")
        .order_by("-created_at", "-id")[:100]
    )
    return render(request, "inbox/queue.html", {"actions": actions})


@login_required
def action_detail(request, action_id: str):
    try:
        action = services.get_action_for_reviewer(action_id, request.user)
    except ActionNotFound:
        raise Http404("no such action") from None
    context = {
        "action": action,
        "payload_json": json.dumps(action.payload, indent=2, sort_keys=True, ensure_ascii=False),
        "context_json": json.dumps(action.context, indent=2, sort_keys=True, ensure_ascii=False),
        "history": AuditEvent.objects.for_action(action.pk),
    }
    return render(request, "inbox/action.html", context)
