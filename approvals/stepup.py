"""Step-up: approving money at or above ``IMPRI_STEP_UP_CENTS`` needs a fresh second factor.

The policy lives here and runs from ``services.decide``, under the action's row
lock with the payload about to be approved; a refusal rolls the decision back
and is audited in a transaction of its own, so the inbox, REST and any later
adapter get the same answer.

The amount is the one every money guard reads (``approvals.money.held``): the
total per currency of the action's declared amounts (its kind's ``money:``), in
the payload that would be approved (the agent's payload with the reviewer's
edits). A kind that declares no money moves an unknown amount, over the
threshold (``IMPRI_UNDECLARED_KINDS=strict``, the default; ``detect`` reads
what the detector finds instead), and a service token can't approve it even
with no threshold set. An amount that can't be read as a whole number of
minor units counts as over the threshold (fail closed). An approval at or above the
threshold passes when the caller presents:

* a session (the inbox) whose last second factor is at most ten minutes old
  (a code from the authenticator app or a recovery code, or MFA asserted by the
  identity provider at sign-in);
* an ordinary reviewer token (``impri token USER``): it is the reviewer's own
  long secret, issued to one person by an administrator, used from their own
  tools; it has no session to show a code in, and refusing it would take
  large amounts off the API altogether. Its approvals are audited under the
  reviewer's name like any other;

and is refused (403 ``step_up_required``, audited ``stepup.refused``) for a
service token (``impri token USER --service``: a program, not a person) and for
any channel that presents no credential here (Slack, the shell): those can
only approve below the threshold.

Adapters say what the caller presented with ``via_session(request)`` or
``via_token(key)`` around their call to ``decide``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from audit import log as audit
from audit.identity import user_ref
from audit.models import ActorType

from . import money
from .errors import StepUpRequired
from .models import Action


@dataclass(frozen=True)
class Credential:
    """What the caller of ``decide`` signed in with."""

    kind: str  # "session", "token" or "service_token"
    verified_at: datetime | None = None  # sessions: when the last second factor passed
    prefix: str = ""  # tokens: the visible start, for the audit log


# How recent a second factor must be for an approval at or above IMPRI_STEP_UP_CENTS.
STEP_UP_WINDOW = timedelta(minutes=10)

_presented: ContextVar[Credential | None] = ContextVar("impri_stepup_credential", default=None)


@contextmanager
def presenting(credential: Credential) -> Iterator[None]:
    token = _presented.set(credential)
    try:
        yield
    finally:
        _presented.reset(token)


def via_session(verified_at: datetime | None):
    """The inbox: a signed-in session, with the time of its last second factor (its caller
    reads it from the session: ``twofactor.services.verified_at``)."""
    return presenting(Credential("session", verified_at=verified_at))


def via_token(key):
    """The REST API: a reviewer token, ordinary or marked as a service token."""
    kind = "service_token" if key.is_service else "token"
    return presenting(Credential(kind, prefix=key.prefix))


def threshold() -> int | None:
    return settings.IMPRI_STEP_UP_CENTS


def reaching(action: Action, payload: dict | None = None) -> money.Amount | None:
    """The amount of ``payload`` (default: the action's) at or above the threshold, if any:
    the largest total of a currency, or an unknown amount (an undeclared kind: over it)."""
    limit = threshold()
    if limit is None:
        return None
    return money.at_or_above(money.held(action, payload), limit)


def needs_step_up(action: Action, payload: dict | None = None) -> bool:
    return reaching(action, payload) is not None


def is_fresh(credential: Credential | None, now: datetime | None = None) -> bool:
    if credential is None or credential.kind != "session" or credential.verified_at is None:
        return False
    age = (now or timezone.now()) - credential.verified_at
    return age.total_seconds() >= 0 and age <= STEP_UP_WINDOW


class Refused(Exception):
    """Raised under the decision's lock; ``decide`` rolls back, then ``refuse`` audits it."""

    def __init__(
        self,
        action: Action,
        by,
        credential: Credential | None,
        amount: money.Amount,
        limit: int | None,
    ):
        super().__init__(action.pk)
        self.action, self.by, self.credential = action, by, credential
        self.amount, self.limit = amount, limit


def check(action: Action, *, by, payload: dict) -> None:
    """Raise Refused for an approval of ``payload`` that the caller's credential can't carry.

    ``decide`` calls it under the action's row lock, with the payload it is about
    to approve (the locked row's payload with the reviewer's edits), after its
    own refusals (outsider, owner, stale figure, bad edits): the figure checked is
    the figure approved, whatever other reviewers did in between.
    """
    credential = _presented.get()
    amount = reaching(action, payload)
    if (
        amount is None
        and money.is_closed(action)
        and credential
        and credential.kind == "service_token"
    ):
        # A program never approves what Impri can't measure, threshold or not (issue 39).
        amount = money.unknown_amount(action.kind)
    if amount is None:
        return
    limit = threshold()
    if credential is not None and credential.kind == "token":
        return
    if is_fresh(credential):
        return
    raise Refused(action, by, credential, amount, limit)


def refuse(refused: Refused) -> StepUpRequired:
    """Audit a refusal in a transaction of its own (the decision's rolled back); the error to raise."""
    credential = refused.credential
    kind = credential.kind if credential else "none"
    with transaction.atomic():
        audit.record(
            "stepup.refused",
            actor_type=ActorType.REVIEWER,
            actor_id=refused.by.get_username(),
            actor_ref=user_ref(refused.by),
            action_id=refused.action.pk,
            data={
                "amount_cents": refused.amount.minor,
                "amount_path": refused.amount.path,
                **({"kind_undeclared": True} if refused.amount.undeclared_kind else {}),
                "step_up_cents": refused.limit,
                "credential": kind,
                **({"key_prefix": credential.prefix} if credential and credential.prefix else {}),
            },
        )
    return StepUpRequired(
        _why(kind, refused.amount, refused.limit),
        amount_cents=refused.amount.minor,
        step_up_cents=refused.limit,
    )


def _why(kind: str, amount: money.Amount, limit: int | None) -> str:
    if amount.undeclared_kind:
        figures = (
            f"kind {amount.undeclared_kind!r} is not declared, so the amount it moves is unknown "
            "and counts as above every limit; declare it under kinds: in the rules file "
            "(money: [{amount: payload.<path>, currency: payload.<path>}], or money: [] if it "
            'moves no money; docs/rules.md, "Kinds and money")'
        )
    elif amount.minor is None:
        figures = (
            f"{amount.path} {amount.problem}, which Impri cannot read as a whole number of "
            f"minor units, so it counts as above the step-up limit of {limit}"
        )
    else:
        figures = (
            f"{amount.path} = {abs(amount.minor)} minor units is at or above the step-up "
            f"limit of {limit}"
        )
    if kind == "service_token":
        return (
            f"a service token cannot approve this action: {figures}"
            + (" (IMPRI_STEP_UP_CENTS)" if limit is not None else "")
            + ", "
            "which needs a person with a second factor; approve it in the inbox"
        )
    if kind == "session":
        return (
            f"a second factor from the last 10 minutes is needed to approve this action: {figures}"
        )
    return (
        f"this channel cannot approve this action: {figures}, which needs a second "
        "factor; approve it in the inbox"
    )
