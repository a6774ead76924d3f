"""What every transition shares: its transaction, the payload digest, groups, the announcement."""

from __future__ import annotations

from contextlib import contextmanager

from django.conf import settings
from django.contrib.auth.models import Group
from django.db import transaction

from audit import log as audit

from .. import events, grant_store, outbox
from ..digests import payload_sha256  # noqa: F401  (the services' name for it)
from ..errors import InvalidInput
from ..models import Action
from ..schemas import json_problem


@contextmanager
def _atomic():
    """A change's transaction: its audit events are appended together just before commit."""
    with transaction.atomic(), audit.batch():
        yield


def default_group() -> Group:
    group, _ = Group.objects.get_or_create(name=settings.IMPRI_DEFAULT_GROUP)
    return group


def _announce(action: Action, event: str, *, new: bool = False) -> None:
    """Tell whoever waits that the action settled: waiters after commit, the agent's webhook.

    ``new``: the action was created in this transaction (a rule decided it), so nobody
    can be waiting on it yet; only the inboxes and the webhook hear of it.
    """
    if event == "action.approved":
        grant_store.issue(action)  # stored with the decision; every read returns it (issue 40)
    events.publish_on_commit(action, event, new=new)
    outbox.enqueue_webhook(action, event)


def _group(name: str | None) -> Group:
    """The group named, or the default group when there is none by that name (never created here)."""
    return (Group.objects.filter(name=name).first() if name else None) or default_group()


def _group_name(action: Action) -> str:
    return action.review_group.name if action.review_group else "(none)"


def _refuse_unstorable(**values) -> None:
    """Every adapter's last wall: nothing that PostgreSQL refuses or a page can't show is stored."""
    for field, value in values.items():
        problem = json_problem(value, field)
        if problem:
            field, _, message = problem.partition(": ")
            raise InvalidInput(field, message)
