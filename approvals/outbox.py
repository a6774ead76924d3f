"""The outboxes, written: webhooks to agents and notifications to reviewer groups.

Rows are written in the transaction of the change they announce, so they
exist exactly when the change does; the ``delivery`` app sends them (at least
once) from Celery or the embedded ticker. In scaled mode a worker is also
nudged right after commit (by task name: the core never imports the senders),
so a delivery doesn't wait for the next beat.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import NamedTuple

from django.conf import settings
from django.contrib.auth.models import Group, User
from django.core.serializers.json import DjangoJSONEncoder
from django.db import transaction
from django.db.models import Exists, Model, OuterRef

from plumbing import fallbacks
from plumbing.celery import app

from . import group_cache
from .models import Action, Notification, WebhookDelivery
from .presenters import decision_out

logger = logging.getLogger(__name__)


def enqueue_webhook(action: Action, event: str) -> WebhookDelivery | None:
    """Announce a settled action to the agent's callback_url, with the body await_decision returns."""
    if not action.callback_url:
        return None
    body = json.loads(json.dumps(decision_out(action), cls=DjangoJSONEncoder))
    delivery = WebhookDelivery.objects.create(
        action=action, event=event, url=action.callback_url, body=body
    )
    kick_on_commit("delivery.tasks.deliver_webhooks")
    return delivery


@dataclass(frozen=True)
class GroupChannel:
    """An outbox an app above the core keeps for a group's notices (webpush: phones).

    ``reachable()`` is an ``Exists()`` over the group (``OuterRef("pk")``): whether
    anyone in it can be reached this way, read in the same query as the group's
    settings so a group nobody can reach costs a push no statement of its own.
    ``enqueue(action, group, kind)`` writes its rows, in the change's transaction.
    ``watch``: the models whose saves and deletes change whom it reaches (a phone's
    registration): each starts a new generation of ``group_cache``, which keeps the answer.
    """

    reachable: Callable[[], Exists]
    enqueue: Callable[[Action, Group, str], object]
    watch: tuple[type[Model], ...] = ()


# Filled by the apps that keep such an outbox, in their AppConfig.ready: the core never
# imports them.
GROUP_CHANNELS: dict[str, GroupChannel] = {}


def add_group_channel(name: str, channel: GroupChannel) -> None:
    GROUP_CHANNELS[name] = channel
    for model in channel.watch:
        group_cache.watch(model)


def enqueue_notifications(action: Action, group: Group, kind: str) -> int:
    """One Notification per channel the group has switched on; returns how many.

    The registered group channels (``GROUP_CHANNELS``) that reach someone in the
    group write their own rows as well.
    """
    has_members, saved, reached = _channel_config(group)
    channels = []
    email_on = saved.email_enabled if saved else True  # no settings row: email is on
    if email_on and (has_members or (saved and saved.extra_emails)):
        channels.append(Notification.Channel.EMAIL)
    if saved and saved.slack_webhook_url:
        channels.append(Notification.Channel.SLACK)
    for channel in channels:
        Notification.objects.create(action=action, group=group, kind=kind, channel=channel)
    if channels:
        kick_on_commit("delivery.tasks.send_notifications")
    for name in reached:
        GROUP_CHANNELS[name].enqueue(action, group, kind)
    return len(channels)


class _Saved(NamedTuple):
    """The fields of a group's ``GroupNotificationSettings`` that choose its channels."""

    email_enabled: bool
    extra_emails: tuple
    slack_webhook_url: str


SAVED_FIELDS = _Saved._fields


def _channel_config(group: Group) -> tuple[bool, _Saved | None, tuple[str, ...]]:
    """Whether an active member of the group has an address, the group's settings, and
    the registered group channels that reach someone in it: one statement, kept by this
    process for the groups' generation (``group_cache``: a change of the group, its
    members, its settings or a channel's devices moves it, in every process).
    """
    return group_cache.cached("channels", group.pk, lambda: _read_channel_config(group))


def _read_channel_config(group: Group) -> tuple[bool, _Saved | None, tuple[str, ...]]:
    names = tuple(GROUP_CHANNELS)
    members = User.objects.filter(groups=OuterRef("pk"), is_active=True).exclude(email="")
    reach = {f"reaches_{name}": GROUP_CHANNELS[name].reachable() for name in names}
    row = (
        Group.objects.filter(pk=group.pk)
        .annotate(has_members=Exists(members), **reach)
        .values_list(
            "has_members",
            *reach,
            "notification_settings__pk",
            *(f"notification_settings__{field}" for field in SAVED_FIELDS),
        )
        .first()
    )
    if row is None:  # the group is gone
        return False, None, ()
    has_members, *rest = row
    reached = tuple(name for name, hit in zip(names, rest[: len(names)], strict=True) if hit)
    saved_pk, email_enabled, extra_emails, slack_webhook_url = rest[len(names) :]
    if saved_pk is None:
        return bool(has_members), None, reached
    # Kept by every thread of the process: nothing in it may change.
    return bool(has_members), _Saved(email_enabled, tuple(extra_emails), slack_webhook_url), reached


def kick_on_commit(task_name: str) -> None:
    # Embedded mode runs tasks eagerly, which here would mean HTTP calls inside
    # a reviewer's request: leave those to the in-process ticker instead.
    if settings.CELERY_TASK_ALWAYS_EAGER:
        return
    transaction.on_commit(lambda: _nudge_soon(task_name))


# The nudge is published from a thread of its own, never from the request: a
# broker that is slow or away (Redis down, kombu reconnecting) costs the
# request nothing, and a burst of commits coalesces into one nudge per task.
_nudger = ThreadPoolExecutor(max_workers=1, thread_name_prefix="impri-nudge")
_queued: set[str] = set()
_queued_lock = threading.Lock()


def _nudge_soon(task_name: str) -> None:
    with _queued_lock:
        if task_name in _queued:
            return
        _queued.add(task_name)
    _nudger.submit(_send, task_name)


def _send(task_name: str) -> None:

    with _queued_lock:
        _queued.discard(task_name)
    try:
        app.send_task(task_name, retry=False)
    except Exception as exc:  # the beat will pick the row up anyway
        fallbacks.note("broker", f"could not nudge {task_name}; the next beat delivers", exc)
