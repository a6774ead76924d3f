"""Past actions as the rules saw them when they were pushed: what a backtest replays.

The rules' adapters (``ops.admin.rules``, ``impri rules``) hand them to ``rules.backtest``:
the rule engine never imports this app, which depends on it.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

from .models import Action


def rule_view(action: Action) -> dict:
    """The action as the rules saw it when it was pushed (its original payload)."""
    return {
        "id": action.pk,
        "kind": action.kind,
        "agent": action.agent.name,
        "agent_id": action.agent_id,
        "payload": action.original_payload,
        "flags": action.flags,
        "context": action.context,
        "money": action.money,
    }


class PastActionViews:
    """The actions pushed since a moment, oldest first, as ``(pushed at, view)``; sized, so a
    backtest's progress bar can say how long is left (one COUNT before the replay)."""

    def __init__(self, since: datetime | None):
        actions = Action.objects.select_related("agent").order_by("created_at", "pk")
        self.actions = actions.filter(created_at__gte=since) if since else actions

    def __len__(self) -> int:
        return self.actions.count()

    def __iter__(self) -> Iterator[tuple[datetime, dict]]:
        for action in self.actions.iterator(chunk_size=2000):
            yield action.created_at, rule_view(action)


def past_action_views(since: datetime | None) -> PastActionViews:
    """Every action pushed since ``since`` (all: None), oldest first: (pushed at, view)."""
    return PastActionViews(since)
