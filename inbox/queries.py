"""Pure reads for the inbox: the queue, its filters and counts, keyset pagination.

Nothing here changes state. Pagination is by keyset (``WHERE (key, id) < (…)``),
never by OFFSET, so the hundredth page costs what the first does.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.core.cache import cache
from django.db.models import F, Q, QuerySet
from django.db.models.functions import Coalesce
from django.utils import timezone

from approvals.models import Action, ActionStatus, Agent

PAGE_SIZE = 50
URGENT_WITHIN = timedelta(hours=1)

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


@dataclass
class Page:
    items: list[Action]
    next_cursor: str | None
    order: str = "newest"
    cursor: str | None = None
    extra: dict = field(default_factory=dict)


# --- Base sets ------------------------------------------------------------------------------


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
        qs = qs.filter(payload__amount_cents__gte=f.amount_min)
    if f.amount_max is not None:
        qs = qs.filter(payload__amount_cents__lte=f.amount_max)
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


# --- Keyset pagination ------------------------------------------------------------------


def encode_cursor(value: datetime, action_id: str) -> str:
    raw = f"{value.isoformat()}|{action_id}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, str] | None:
    """The (key, id) a cursor points after, or None for a cursor nobody could have made."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        value, action_id = raw.split("|", 1)
        moment = datetime.fromisoformat(value)
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None
    if moment.tzinfo is None or not action_id:
        return None
    return moment, action_id


def page(qs: QuerySet[Action], order: str, cursor: str | None, size: int | None = None) -> Page:
    """One page in ``order`` after ``cursor``: size + 1 rows are read to know if more exist."""
    size = size or PAGE_SIZE
    how = ORDERS[order]
    position = decode_cursor(cursor) if cursor else None
    if position:
        qs = qs.filter(how.after(*position))
    related = qs.select_related("agent", "review_group", "decided_by_user", "claim__user")
    rows = list(related.order_by(*how.order_by())[: size + 1])
    next_cursor = None
    if len(rows) > size:
        rows = rows[:size]
        last = rows[-1]
        next_cursor = encode_cursor(getattr(last, how.key), last.pk)
    return Page(rows, next_cursor, order, cursor if position else None)


def neighbours(user, action: Action, order: str = "newest") -> tuple[Action | None, Action | None]:
    """The pending actions just before and after ``action`` in the queue's order."""
    how = ORDERS[order]
    qs = pending_for(user).exclude(pk=action.pk).only("id", "title", how.key)
    value = getattr(action, how.key)
    after = qs.filter(how.after(value, action.pk)).order_by(*how.order_by()).first()
    reverse = Order(how.key, not how.descending)
    before = qs.filter(reverse.after(value, action.pk)).order_by(*reverse.order_by()).first()
    return before, after


# --- Counts -------------------------------------------------------------------------------

# Counting is exact up to this many, then shown as "1,000+": an exact count of
# 100,000 pending rows costs a scan, a capped one stops at the cap.
COUNT_CAP = 1000


@dataclass(frozen=True)
class Tally:
    n: int
    more: bool = False

    def __str__(self) -> str:
        return f"{self.n:,}+" if self.more else f"{self.n:,}"

    def __bool__(self) -> bool:
        return self.n > 0


def tally(qs: QuerySet) -> Tally:
    found = qs.order_by().values("pk")[: COUNT_CAP + 1].count()
    return Tally(min(found, COUNT_CAP), found > COUNT_CAP)


KINDS_CACHE_S = 60


def known_kinds() -> list[str]:
    """Every kind ever pushed, for the filter menu; cached, since a distinct scan is not free."""

    def read() -> list[str]:
        return sorted(Action.objects.order_by().values_list("kind", flat=True).distinct())

    return cache.get_or_set("inbox:kinds", read, KINDS_CACHE_S)


@dataclass
class Counts:
    pending: Tally
    matching: Tally | None
    due_soon: Tally
    decided_today_by_me: Tally
    kinds: list[str]
    agents: list[str]


def counts(user, f: Filters, shown: Page | None = None, now: datetime | None = None) -> Counts:
    """The header's totals and the filter menus' choices; each query stops early.

    When the first page ``shown`` already holds every match, that is the count:
    a filter that matches little would otherwise be a second scan.
    """
    now = now or timezone.now()
    pending = pending_for(user, now)
    start_of_day = now.replace(hour=0, minute=0, second=0, microsecond=0)
    matching = None
    if f.active():
        complete = shown is not None and shown.cursor is None and shown.next_cursor is None
        matching = Tally(len(shown.items)) if complete else tally(filtered(pending, f, user, now))
    return Counts(
        pending=tally(pending),
        matching=matching,
        due_soon=tally(pending.filter(expires_at__lte=now + URGENT_WITHIN)),
        decided_today_by_me=tally(
            Action.objects.filter(decided_by_user=user, decided_at__gte=start_of_day)
        ),
        kinds=known_kinds(),
        agents=list(Agent.objects.order_by("name").values_list("name", flat=True)),
    )
