"""The outboxes delivery sends and prunes, and the one loop that sends any of them.

An outbox is a model of rows written in the transaction of the change they
announce (webhooks and notices by the core, the Slack app's messages and pushes
to phones by their apps), how to send one row, and a lane (``delivery.lanes``)
of its own. Each app registers its outboxes here in its ``AppConfig.ready``: the
retention prunes every registered outbox, and the
ticker and the Celery tasks sweep each through :meth:`Outbox.send_due`.

Sending one row is the same for all (``delivery.sending`` has the mechanics):
take the lease, read the row, let the outbox make one attempt (it gives the
database connection back before its network call), then record the outcome
in one transaction. The outbox's ``send`` says how it went by raising:

* nothing: the row is delivered (``sent``, by default ``sending.record_success``);
* :class:`GiveUp` (or :class:`Skip`): nothing can be sent, the row is closed now,
  with the reason;
* :class:`Failed` or any other exception: the attempt failed and is retried with
  backoff until a day has passed; an exception of ``no_answer``'s types means the
  destination did not answer, so the sweep leaves its other rows for next time.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from django.db import connection, models, transaction

from . import lanes, sending

logger = logging.getLogger(__name__)


class GiveUp(Exception):
    """Nothing can be sent for this row: it is closed as given up, with this text."""


class Skip(GiveUp):
    """The row has nothing left to say (the action moved on, a channel is off): given up."""

    def __init__(self, why: str):
        super().__init__(f"skipped: {why}")


class Failed(Exception):
    """The receiver answered with an error that retrying may fix; recorded as its text."""


@dataclass
class Attempt:
    """One attempt at one row, as its outbox's ``send`` sees it."""

    client: object  # the lane's HTTP client (httpx.Client)
    release: Callable[[], None]  # give the database connection back (background sends)
    clock: Callable[[], datetime]  # now (fixed when the sweep was given a time)
    began: float = field(default_factory=time.monotonic)
    notes: dict = field(default_factory=dict)  # what ``send`` tells ``finish``

    def duration_ms(self) -> int:
        return int((time.monotonic() - self.began) * 1000)


# By name, in the order they were registered (delivery's own first: apps' ready order).
REGISTERED: dict[str, Outbox] = {}


def register(*boxes: Outbox) -> None:
    """Make outboxes known to the retention (each app's ``AppConfig.ready``)."""
    for box in boxes:
        REGISTERED[box.name] = box


def _noop() -> None:
    pass


@dataclass(eq=False)
class Outbox:
    name: str  # its lane's name, and what its log lines say
    model: type[models.Model]
    lane: lanes.Lane
    # The due rows (oldest first, a queryset), up to n: [(pk, keys)]; keys[0] is the destination.
    read: Callable[[models.QuerySet, int], list[lanes.Row]]
    load: Callable[[object], models.Model]  # one row, with what sending it reads
    send: Callable[[models.Model, Attempt], None]  # one attempt; raises to say how it went
    no_answer: tuple[type[BaseException], ...] = (OSError,)
    # Recording a success: delivered, whoever holds the lease now (the Slack app's checks
    # that the action did not change meanwhile).
    sent: Callable[[models.Model, datetime, datetime], None] | None = None
    # Called in the transaction that records the outcome, with the error ("" when sent).
    finish: Callable[[models.Model, Attempt, str], None] | None = None
    enabled: Callable[[], bool] = lambda: True
    pruned_as: str = ""  # its count in the retention's summary; empty: never pruned
    listed_when_none: bool = False  # a count of 0 is still listed (delivery's own outboxes)
    # Rows of other models that go with a pruned row: (their count's name, model, its key).
    pruned_with: tuple[tuple[str, type[models.Model], str], ...] = ()

    def __post_init__(self) -> None:
        self.lane.sweeper = self.send_in_background

    def send_due(
        self, now: datetime | None = None, limit: int = 50, background: bool = False
    ) -> int:
        """Send the rows that are due (at most ``limit``), a fair share per destination.

        Inline (the default) on this thread, returning the attempts made; in the
        background (ticker, Celery) on the lane's threads, returning how many rows
        it handed them (see ``delivery.lanes``). With nothing due: one query.
        """
        read_clock = sending.clock(now)

        def read(claimed: list, n: int) -> list:
            due = self.model.objects.due(read_clock()).exclude(pk__in=claimed)
            return self.read(due.order_by("next_attempt_at", "pk"), n)

        def send(pk, in_background: bool) -> str:
            return self.send_one(pk, read_clock, connection.close if in_background else None)

        return self.lane.sweep(read, send, limit=limit, background=background)

    def send_in_background(self) -> int:
        """A background sweep: what the ticker, the Celery task and the lane itself run."""
        return self.send_due(background=True) if self.enabled() else 0

    def send_one(self, pk, read_clock: Callable[[], datetime], release=None) -> str:
        """Lease one row and make one attempt; an outcome from ``delivery.sending``."""
        lease_until = sending.take_lease(self.model, pk, read_clock())
        if lease_until is None:
            return sending.BUSY
        row = self.load(pk)
        attempt = Attempt(self.lane.client(), release or _noop, read_clock)
        outcome, error, give_up = sending.SENT, "", False
        try:
            self.send(row, attempt)
        except GiveUp as exc:
            outcome, error, give_up = sending.FAILED, str(exc), True
        except Exception as exc:  # a failed send is retried with backoff, whatever broke
            error = str(exc) if isinstance(exc, Failed) else sending.describe(exc)
            no_answer = isinstance(exc, self.no_answer)
            outcome = sending.UNREACHABLE if no_answer else sending.FAILED
            if not isinstance(exc, Failed | GiveUp) and not no_answer:
                logger.warning("%s %s: unexpected error", self.name, pk, exc_info=True)
        self._settle(row, lease_until, attempt, outcome, error, give_up, read_clock())
        return outcome

    def _settle(self, row, lease_until, attempt, outcome, error, give_up, at) -> None:
        with transaction.atomic():
            if self.finish is not None:
                self.finish(row, attempt, error)
            if outcome == sending.SENT:
                (self.sent or _record_success)(row, lease_until, at)
                return
            if give_up:
                self.model.objects.filter(pk=row.pk, locked_until=lease_until).update(
                    last_error=error, locked_until=None, gave_up_at=at
                )
                logger.warning("%s %s given up: %s", self.name, row.pk, error)
                return
            args = (row.pk, lease_until, row.created_at, row.attempts, error, at)
            gave_up = sending.record_failure(self.model, *args)
        (logger.error if gave_up else logger.warning)(
            "%s %s failed%s: %s", self.name, row.pk, " for the last time" if gave_up else "", error
        )


def _record_success(row, lease_until: datetime, at: datetime) -> None:
    sending.record_success(type(row), row.pk, at)
