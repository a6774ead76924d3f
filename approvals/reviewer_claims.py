""" "I'm on it": a reviewer marks a pending action as being looked at.

Advisory: a claim never stops another reviewer from deciding; it is shown in
every open queue and on the action page so two people don't work one refund.
One claim per action (the newest wins), stored in the database so every
process sees it (SQLite embedded, PostgreSQL scaled), and gone after
``CLAIM_TTL`` or when its reviewer leaves the page (release). Each change is
published to the inboxes like any other change of the action.
"""

from __future__ import annotations

from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from . import events
from .errors import ActionNotPending, Forbidden
from .models import Action, Claim
from .services import can_review

# "released after 10 minutes": a claim nobody renews runs out on its own.
CLAIM_TTL = timedelta(minutes=10)


def current(action: Action, now=None) -> Claim | None:
    """The live claim on ``action``, if any (none once it expired or the action settled)."""
    now = now or timezone.now()
    if action.is_settled:
        return None
    claim = Claim.objects.filter(action=action, expires_at__gt=now).select_related("user").first()
    return claim


def claim(action: Action, user) -> Claim:
    """Mark ``action`` as looked at by ``user`` for the next ``CLAIM_TTL``; renews their own claim.

    The caller has checked that ``user`` may review the action (``services.can_review``).
    """

    if not can_review(user, action):
        raise Forbidden("you are not a reviewer of this action's group")
    if action.is_settled:
        raise ActionNotPending(action.pk, action.effective_status)
    now = timezone.now()
    with transaction.atomic():
        Claim.objects.filter(expires_at__lte=now).delete()
        held, _ = Claim.objects.update_or_create(
            action=action, defaults={"user": user, "claimed_at": now, "expires_at": now + CLAIM_TTL}
        )
        _publish(action, "action.claimed", user.get_username())
    return held


def release(action: Action, user) -> bool:
    """Drop ``user``'s claim on ``action`` (another reviewer's claim stays). True when one was dropped."""
    with transaction.atomic():
        dropped, _ = Claim.objects.filter(action=action, user=user).delete()
        if dropped:
            _publish(action, "action.released", None)
    return bool(dropped)


def release_all(user, action_ids) -> int:
    """Drop ``user``'s claims on these actions (their page closed, their socket went away)."""
    released = 0
    for action in Action.objects.filter(pk__in=list(action_ids)):
        released += release(action, user)
    return released


def _publish(action: Action, event: str, claimed_by: str | None) -> None:
    message = events.inbox_update(action, event)
    message["claimed_by"] = claimed_by
    groups = [events.inbox_group(action.review_group_id), events.INBOX_ALL_GROUP]
    sends = [(group, message) for group in groups]
    transaction.on_commit(lambda: events.publish_many(sends))
