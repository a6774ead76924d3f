"""Deciding from Slack: who the Slack member is, whether Slack may decide, then the service.

A decision from Slack is an ordinary ``services.decide`` call by the reviewer
the Slack member maps to, so the group check, the owner check, edit bounds,
quorum, four-eyes (the payload hash the message showed), races and audit are
the inbox's. What Slack adds is checked here first: the member must map to an
active Impri user (an explicit link in admin, else the confirmed e-mail of
their Slack profile), and an action above ``IMPRI_SLACK_MAX_APPROVE_CENTS`` is
approved in the inbox only. The audit events of the decision carry
``via: "slack"`` and the Slack member ID.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from django.conf import settings
from django.contrib.auth import get_user_model
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from approvals import money, services
from approvals.errors import ActionNotPending, Forbidden, InvalidInput, StalePayload
from approvals.models import Action
from approvals.presenters import inbox_url
from audit import log as audit

from .models import SlackUserLink
from .notices import slack_escape

logger = logging.getLogger(__name__)


def over_limit(action: Action, edits: dict | None = None) -> bool:
    """True when the payload Slack would approve carries an amount above the Slack limit.

    The amount is the one every money guard reads (``approvals.money.held``: the
    total per currency of the kind's declared amounts; an amount it cannot read,
    and any action of a kind that declares no money, counts as above), after the
    reviewer's edits: an edit that raises the figure is checked, not the figure
    before it.
    """
    if money.is_closed(action):
        return True
    payload = action.payload
    if edits:
        try:
            payload = services.apply_edits(action, edits)
        except InvalidInput:
            return False  # the service refuses the edits itself, naming the field
    found = money.held(action, payload)
    return money.above(found, settings.IMPRI_SLACK_MAX_APPROVE_CENTS) is not None


def limit_text(action: Action) -> str:
    asked = money.primary(action)
    return str(money.Money(settings.IMPRI_SLACK_MAX_APPROVE_CENTS, asked.currency if asked else ""))


# --- Who is clicking -------------------------------------------------------------------


def reviewer_for(slack_user_id: str, client: WebClient):
    """The active Impri user behind a Slack member, or None.

    An explicit link wins. Otherwise the member's Slack profile must carry a
    confirmed e-mail address (``users.info``: ``is_email_confirmed``; the app
    needs the ``users:read.email`` scope) that exactly one active user has.
    Bots, deleted members and unconfirmed addresses map to nobody.
    """
    User = get_user_model()
    link = SlackUserLink.objects.select_related("user").filter(slack_user_id=slack_user_id).first()
    if link is not None:
        return link.user if link.user.is_active else None
    try:
        member = client.users_info(user=slack_user_id).get("user") or {}
    except SlackApiError as exc:
        logger.warning(
            "slack: users.info for %s failed: %s", slack_user_id, exc.response.get("error")
        )
        return None
    except Exception as exc:  # Slack unreachable or slow: nobody we can name
        logger.warning("slack: users.info for %s failed: %s", slack_user_id, exc)
        return None
    if (
        member.get("deleted")
        or member.get("is_bot")
        or member.get("is_email_confirmed") is not True
    ):
        return None
    email = ((member.get("profile") or {}).get("email") or "").strip()
    if not email:
        return None
    matches = list(User.objects.filter(email__iexact=email, is_active=True)[:2])
    if len(matches) != 1:
        return None
    # Staff and superusers (a superuser reviews every group) are mapped by an explicit link
    # only: whoever can set a Slack profile's e-mail must not become an Impri administrator.
    found = matches[0]
    return None if found.is_staff or found.is_superuser else found


# --- Outcomes ----------------------------------------------------------------------------


@dataclass
class Outcome:
    """What to tell the clicking member: nothing (``text`` empty) after a decision."""

    decided: bool
    text: str = ""
    link: str = ""  # the action's page in the inbox, where Slack could not decide
    field: str = ""  # for a modal: the edited path the problem is about

    def mrkdwn(self) -> str:
        text = slack_escape(self.text)  # it may quote an agent's or a reviewer's name
        return f"{text} <{self.link}|Open it in Impri>." if self.link else text

    def plain(self) -> str:
        return f"{self.text} Open it in Impri: {self.link}" if self.link else self.text


def refused(action: Action, why: str) -> Outcome:
    return Outcome(False, why, link=inbox_url(action))


def check(action: Action | None, user, verdict: str, edits: dict | None = None) -> Outcome | None:
    """Why Slack may not take this decision from this member, or None when it may."""
    if action is None:
        return Outcome(False, "")  # no such action: nothing to say, nothing decided
    if user is None:
        return refused(
            action,
            "Your Slack account is not linked to an Impri reviewer (no link in admin, and no "
            "confirmed Slack e-mail that matches one reviewer), so nothing was decided.",
        )
    if not services.can_review(user, action):
        return refused(
            action,
            f"You ({user.get_username()}) are not a reviewer in the group this action is "
            "routed to, so nothing was decided.",
        )
    if verdict == "approve" and money.is_closed(action):
        return refused(
            action,
            f"The kind {action.kind} is not declared, so Impri can't know the amount it moves "
            "and Slack may not approve it: approve it in Impri (or ask an admin to declare the "
            "kind in the rules file). Nothing was decided.",
        )
    if verdict == "approve" and over_limit(action, edits):
        return refused(
            action,
            f"This action is above {limit_text(action)}, the most that may be approved from "
            "Slack: approve or edit it in Impri. Nothing was decided.",
        )
    return None


def too_late(action_id: str) -> Outcome:
    current = Action.objects.select_related("decided_by_user", "agent").get(pk=action_id)
    who = (current.decided_by or {}).get("name")
    by = f" by {who}" if who else ""
    return refused(
        current,
        f"Too late: this action is already {current.effective_status}{by}. Nothing was changed.",
    )


def decide(
    action_id: str,
    slack_user_id: str,
    client: WebClient,
    *,
    verdict: str,
    seen_sha256: str | None,
    edits: dict | None = None,
    note: str = "",
) -> Outcome:
    """Map the member, check what Slack adds, and decide through the service."""
    action = Action.objects.select_related("agent").filter(pk=action_id).first()
    user = reviewer_for(slack_user_id, client) if action is not None else None
    problem = check(action, user, verdict, edits)
    if problem is not None:
        return problem
    try:
        with audit.context(via="slack", slack_user_id=slack_user_id):
            decided = services.decide(
                action.pk,
                by=user,
                verdict=verdict,
                edits=edits or {},
                note=note,
                approves_sha256=seen_sha256 if verdict == "approve" else None,
            )
    except ActionNotPending:
        return too_late(action.pk)
    except StalePayload:
        return refused(
            action,
            "The payload changed since this message was posted (another reviewer edited it): "
            "look at it again. Nothing was decided.",
        )
    except InvalidInput as exc:
        path = (exc.field or "").removeprefix("edits.")
        return Outcome(False, exc.message.removeprefix(f"{exc.field}: "), field=path)
    except Forbidden as exc:
        return refused(action, f"{exc.message}.")
    if verdict == "approve" and decided.status == "pending":
        digest = services.payload_sha256(decided.payload)
        have = decided.reviews.filter(verdict="approve", payload_sha256=digest).count()
        left = max(decided.approvals_required - have, 1)
        return Outcome(True, f"Your approval is recorded; {left} more needed.")
    return Outcome(True)
