"""Reads and permissions: finding an action, who may see it, and listing actions.

Nothing here changes state. The one way to list actions, for the inbox's queue
and history and the REST list alike: a base set (:func:`pending_for`,
:func:`decided_for`, :func:`listed_for`), :func:`filtered`, and :func:`keyset`
pages in an :class:`Order`. Pagination is by keyset, never by OFFSET, so the
hundredth page costs what the first does; each adapter keeps its own cursor
format over the ``(key, id)`` position.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import F, Q, QuerySet
from django.db.models.functions import Coalesce
from django.utils import timezone

from ..errors import ActionNotFound, Forbidden
from ..models import Action, ActionStatus, Agent


def _load(action_id: str) -> Action:
    try:
        return Action.objects.select_related("agent", "decided_by_user", "review_group").get(
            pk=action_id
        )
    except Action.DoesNotExist:
        raise ActionNotFound(action_id) from None


def get_action_for_agent(action_id: str, agent: Agent) -> Action:
    action = _load(action_id)
    if action.agent_id != agent.pk:
        raise Forbidden(f"action {action_id} belongs to another agent")
    return action


def get_action_for_reviewer(action_id: str, user) -> Action:
    action = _load(action_id)
    if not can_review(user, action):
        raise ActionNotFound(action_id)
    return action


def can_review(user, action: Action) -> bool:
    if not user.is_active:
        return False
    if user.is_superuser:
        return True
    return (
        action.review_group_id is not None
        and user.groups.filter(pk=action.review_group_id).exists()
    )


# --- Listing: filters, orders, base sets ---------------------------------------------

# age filter value -> (older than, younger than)
AGES: dict[str, tuple[timedelta | None, timedelta | None]] = {
    "lt1h": (None, timedelta(hours=1)),
    "1h-24h": (timedelta(hours=1), timedelta(hours=24)),
    "gt24h": (timedelta(hours=24), None),
}


@dataclass(frozen=True)
class Order:
    """One queue order: the sort key column and its direction; ``id`` breaks ties."""

    key: str
    descending: bool

    def order_by(self) -> tuple[str, str]:
        sign = "-" if self.descending else ""
        return (f"{sign}{self.key}", f"{sign}id")

    def after(self, value, action_id: str) -> Q:
        """Rows strictly after ``(value, action_id)``, written as one range on the key.

        ``key <= v AND NOT (key = v AND id >= i)`` rather than ``key < v OR (…)``:
        both databases turn it into one index range scan in order; the OR form
        makes SQLite read and sort every pending row.
        """
        if self.descending:
            return Q(**{f"{self.key}__lte": value}) & ~Q(**{self.key: value, "id__gte": action_id})
        return Q(**{f"{self.key}__gte": value}) & ~Q(**{self.key: value, "id__lte": action_id})


ORDERS = {
    "newest": Order("created_at", descending=True),
    "urgent": Order("expires_at", descending=False),
    # History: the most recently settled first (an unswept expiry settles at expires_at).
    "decided": Order("settled_at", descending=True),
}


@dataclass(frozen=True)
class Filters:
    q: str = ""
    kind: str = ""
    agent: str = ""
    group: int | None = None
    age: str = ""
    amount_min: int | None = None
    amount_max: int | None = None
    status: str = ""
    mine: bool = False

    def active(self) -> bool:
        return any(value not in ("", None, False) for value in self.__dict__.values())


# --- Listing: the sets, their filters ------------------------------------------------------------------------------


def pending_for(user, now: datetime | None = None) -> QuerySet[Action]:
    """Pending, not yet overdue, in one of the reviewer's groups."""
    return Action.objects.visible_to_reviewer(user).with_effective_status(ActionStatus.PENDING, now)


def decided_for(user, now: datetime | None = None) -> QuerySet[Action]:
    """Everything the reviewer's groups can no longer decide, with ``settled_at`` to sort by."""
    now = now or timezone.now()
    return (
        Action.objects.visible_to_reviewer(user)
        .exclude(status=ActionStatus.PENDING, expires_at__gt=now)
        .annotate(settled_at=Coalesce(F("decided_at"), F("expires_at")))
    )


def filtered(qs: QuerySet[Action], f: Filters, user, now: datetime | None = None) -> QuerySet:
    now = now or timezone.now()
    if f.kind:
        qs = qs.filter(kind=f.kind)
    if f.agent:
        qs = qs.filter(agent__name=f.agent)
    if f.group:
        qs = qs.filter(review_group_id=f.group)
    if f.age in AGES:
        older, younger = AGES[f.age]
        if older:
            qs = qs.filter(created_at__lte=now - older)
        if younger:
            qs = qs.filter(created_at__gt=now - younger)
    if f.amount_min is not None:
        qs = qs.filter(amount_minor__gte=f.amount_min)
    if f.amount_max is not None:
        qs = qs.filter(amount_minor__lte=f.amount_max)
    if f.status:
        qs = qs.with_effective_status(f.status, now)
    if f.mine:
        qs = qs.filter(Q(decided_by_user=user) | Q(reviews__reviewer=user)).distinct()
    if f.q:
        qs = qs.filter(_search(f.q))
    return qs


def _search(text: str) -> Q:
    """An action id finds that action; other text matches the title, kind or agent name."""
    text = text.strip()
    if text.startswith("act_") and " " not in text:
        return Q(pk=text)
    agents = Agent.objects.filter(name__icontains=text).values_list("pk", flat=True)
    # Agents are few: resolving them first keeps the join out of the scan over actions.
    return Q(title__icontains=text) | Q(kind__icontains=text) | Q(agent_id__in=list(agents))


def listed_for(*, agent: Agent | None = None, user=None) -> QuerySet[Action]:
    """What a caller may list: an agent its own actions, a reviewer those routed to their groups."""
    if agent is not None:
        return Action.objects.filter(agent=agent)
    return Action.objects.visible_to_reviewer(user)


# --- Keyset pagination ------------------------------------------------------------------


def keyset(
    qs: QuerySet[Action], order: str, position: tuple[datetime, str] | None, size: int
) -> tuple[list[Action], bool]:
    """Up to ``size`` rows in ``order`` after ``position`` (a ``(key, id)``), and whether more exist.

    ``size + 1`` rows are read to know if more exist.
    """
    how = ORDERS[order]
    if position:
        qs = qs.filter(how.after(*position))
    related = qs.select_related("agent", "review_group", "decided_by_user", "claim__user")
    rows = list(related.order_by(*how.order_by())[: size + 1])
    return rows[:size], len(rows) > size
