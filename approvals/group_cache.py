"""This process's copy of what a push reads to route an action: the rule set's revision,
each reviewer group by name, and how a group hears of its queue (``approvals.outbox``'s
channel check).

Every push reads the rules' revision and the groups its rules route to, and one that waits
for review reads the group's channels (an active member with an address, its notification
settings, the phones of ``outbox.GROUP_CHANNELS``). They change seldom; a process keeps
what it read, tagged with the groups' *generation*: a random token in the shared ``keys``
cache (Redis in the scaled mode, a file in the data directory in the embedded mode, as
``identity.keys``'s key check), which ``groups_changed`` replaces on every save and delete
of a group, a user, a membership (``User.groups``), a group's notification settings, the
models a group channel watches (``outbox.GroupChannel.watch``) and a rule-set version
(``rules.models.RuleSetVersion``, which every rule-set change writes), before and again
after the commit. So a member removed from a group is no longer notified, and a rule-set
change is in force, in every process from the next push on.

When the generation can't be read (Redis away), nothing is served from the cache and it is
emptied; ``GROUP_CACHE_S`` bounds what a process keeps in any case (a write that sends no
signal, ``QuerySet.update``, is seen by then: the services that make one that matters call
``groups_changed`` themselves).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import transaction
from django.db.models.signals import m2m_changed, post_delete, post_save

from plumbing.generations import Generation
from rules.models import RuleSetVersion

from .models import GroupNotificationSettings

GROUP_CACHE_S = 60.0
T = TypeVar("T")


@dataclass
class _State:
    generation: str
    until: float  # time.monotonic()
    groups: dict[str, tuple[int, str] | None] = field(default_factory=dict)  # None: no such group
    values: dict[tuple[str, Any], Any] = field(default_factory=dict)


_state: _State | None = None


def forget() -> None:
    """Empty this process's cache (the next read of each group is the database's)."""
    global _state
    _state = None


_GENERATION = Generation(
    "groups:generation",
    forget=forget,
    unread="reviewer groups are read from the database",
    unsent="other processes keep their cached groups (GROUP_CACHE_S)",
)


def _current() -> _State | None:
    """The cache of the current generation (a new, empty one when it moved); None without one."""
    global _state
    generation = _GENERATION.current()  # before any read it guards: a later change moves it
    if generation is None:
        return None
    state, now = _state, time.monotonic()
    if state is None or state.generation != generation or state.until <= now:
        state = _state = _State(generation, now + GROUP_CACHE_S)
    return state


class Reading:
    """One look at the generation, and what is read under it: a caller that reads several
    things at once (a push's first read: the revision and the groups) asks the shared
    cache once."""

    def __init__(self) -> None:
        self.state = _current()

    def groups_named(self, names: Iterable[str]) -> dict[str, Group]:
        """The groups of these names that exist, by name: fresh instances, one query at most."""
        wanted, state = set(names), self.state
        if state is not None and wanted <= state.groups.keys():
            return {
                name: Group.from_db("default", ["id", "name"], row)
                for name in wanted
                if (row := state.groups[name]) is not None
            }
        found = {group.name: group for group in Group.objects.filter(name__in=wanted)}
        if state is not None:
            rows = {name: (found[name].pk, name) if name in found else None for name in wanted}
            _keep(lambda: state.groups.update(rows))
        return found

    def cached(self, section: str, key: Any, read: Callable[[], T]) -> T:
        """``read()``, kept for this generation under ``(section, key)``: it must return a
        value nobody changes (a tuple, a NamedTuple of plain values)."""
        state = self.state
        if state is None:
            return read()
        slot = (section, key)
        if slot in state.values:
            return state.values[slot]
        value = read()
        _keep(lambda: state.values.__setitem__(slot, value))
        return value


def groups_named(names: Iterable[str]) -> dict[str, Group]:
    """``Reading().groups_named``: for a caller that reads nothing else of the cache."""
    return Reading().groups_named(names)


def cached(section: str, key: Any, read: Callable[[], T]) -> T:
    """``Reading().cached``: for a caller that reads nothing else of the cache."""
    return Reading().cached(section, key, read)


def _keep(store: Callable[[], object]) -> None:
    """Keep what was read once its transaction commits (at once outside one): a read inside
    a transaction that changed a group and then rolled back is never kept."""
    transaction.on_commit(store)


def groups_changed(using: str = "default") -> None:
    """A group, a membership or a group's channels changed: every process reads them again
    (now, and once more after the commit)."""
    _GENERATION.changed(using)


# --- What moves the generation ------------------------------------------------------------

# Saves of these fields alone change nothing a group's channels answer.
_BOOKKEEPING = frozenset({"last_login"})


def _saved(sender, instance, update_fields=None, using="default", **kwargs) -> None:
    if update_fields is not None and set(update_fields) <= _BOOKKEEPING:
        return
    groups_changed(using)


def _deleted(sender, instance, using="default", **kwargs) -> None:
    groups_changed(using)


def _membership(sender, instance, action, using="default", **kwargs) -> None:
    if action in ("post_add", "post_remove", "post_clear"):
        groups_changed(using)


def watch(model) -> None:
    """Start a new generation on every save and delete of ``model``."""
    uid = f"group_cache:{model._meta.label}"
    post_save.connect(_saved, sender=model, dispatch_uid=uid, weak=False)
    post_delete.connect(_deleted, sender=model, dispatch_uid=uid, weak=False)


def connect() -> None:
    """The core's own models (``ApprovalsConfig.ready``); a group channel's are added by
    ``outbox.add_group_channel``."""
    user = get_user_model()
    for model in (Group, user, GroupNotificationSettings, RuleSetVersion):
        watch(model)
    m2m_changed.connect(
        _membership, sender=user.groups.through, dispatch_uid="group_cache:memberships", weak=False
    )
