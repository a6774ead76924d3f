"""Pure reads for the inbox: pages with the inbox's cursor, neighbours, counts.

Nothing here changes state. The sets, filters, orders and keyset pagination are
the one listing of actions in ``approvals.services.selectors`` (the REST list
uses it too); this module adds what only the inbox needs.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.core.cache import cache
from django.db.models import QuerySet
from django.utils import timezone

from approvals.models import Action, Agent
from approvals.services.selectors import ORDERS, Filters, Order, filtered, keyset, pending_for

PAGE_SIZE = 50
URGENT_WITHIN = timedelta(hours=1)


@dataclass
class Page:
    items: list[Action]
    next_cursor: str | None
    order: str = "newest"
    cursor: str | None = None
    extra: dict = field(default_factory=dict)


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
    """One page in ``order`` after ``cursor``."""
    how = ORDERS[order]
    position = decode_cursor(cursor) if cursor else None
    rows, more = keyset(qs, order, position, size or PAGE_SIZE)
    next_cursor = None
    if more:
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
