"""Delivery lanes: outbox rows sent concurrently, with a fair share per destination.

A lane (one for webhooks, one for notifications, so reviewers' notices never
wait behind agents' callbacks) owns a pool of ``IMPRI_DELIVERY_CONCURRENCY``
threads in each process. Every row carries *keys* (its destination host, and
for a webhook its agent); at most ``IMPRI_DELIVERY_PER_DESTINATION`` rows per
key are in flight at once. So a receiver that accepts and never answers, or
an agent naming many such receivers, holds at most that many threads for one
timeout each, and everyone else's rows go out beside them.

A sweep reads due rows oldest first, interleaved by their first key (each
destination's oldest row, then each one's second, ...) and, within one
destination, taking turns between its other keys (agents): an agent with rows
in flight goes after one without, so one agent's dozen slow callbacks to a
host never hold another agent's callback to that host behind all of them. It
claims what fits its keys' limits and sends it:

* **inline** (``background=False``): on the caller's thread, one after the
  other, round after round until nothing due is left. Tests and one-off calls
  use this; it sees the caller's transaction.
* **in the background** (the embedded ticker, Celery tasks): the claimed rows
  go to the lane's threads and the sweep returns at once, so the next sweep
  runs on time whatever a receiver does. When a row finishes and the last
  sweep left rows behind for lack of room, another sweep runs at once.

A row handed to the threads is not read again by a background sweep here
until its send has ended; whoever sends, the outbox's lease keeps one sender
per row at a time (inline sweeps rely on the lease alone).
"""

from __future__ import annotations

import logging
import os
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor

import httpx
from django.conf import settings
from django.db import connection

from plumbing import outbound

logger = logging.getLogger(__name__)

# Outcomes of one send (delivery.sending defines the same names).
BUSY = "busy"
UNREACHABLE = "unreachable"

Row = tuple[object, tuple[str, ...]]  # (pk, keys); keys[0] is the destination


def concurrency() -> int:
    return settings.IMPRI_DELIVERY_CONCURRENCY


def per_destination() -> int:
    return settings.IMPRI_DELIVERY_PER_DESTINATION


def fair_order(rows: Iterable[Row], in_flight: Counter[str] | None = None) -> list[Row]:
    """Round-robin over first keys; within one, turns between the other keys; oldest first.

    A row's turn within its destination counts what its other key (the agent) already
    has in flight (``in_flight``) and the rows of it before this one.
    """
    in_flight = in_flight or Counter()
    turns: Counter[tuple[str, str]] = Counter()
    by_destination: dict[str, list] = {}
    for position, (pk, keys) in enumerate(rows):
        owner = keys[1] if len(keys) > 1 else ""
        turn = (in_flight[owner] if owner else 0) + turns[keys[0], owner]
        turns[keys[0], owner] += 1
        by_destination.setdefault(keys[0], []).append((turn, position, (pk, keys)))
    ranked = []
    for items in by_destination.values():
        items.sort(key=lambda item: item[:2])
        ranked += [(index, position, row) for index, (_, position, row) in enumerate(items)]
    return [row for _, _, row in sorted(ranked, key=lambda item: item[:2])]


class Lane:
    def __init__(self, name: str, user_agent: str):
        self.name = name
        self.user_agent = user_agent
        self.lock = threading.Lock()
        self.active: Counter[str] = Counter()
        self.claimed: set = set()
        self.left_behind = False
        self.sweeper: Callable[[], object] | None = None  # a background sweep, for kick()
        self._pid: int | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._kicker: ThreadPoolExecutor | None = None
        self._kick_pending = False
        self._client: httpx.Client | None = None

    # --- Resources, made once per process (Celery forks its workers) ------------------

    def _fresh(self) -> None:
        if self._pid != os.getpid():
            self._pid = os.getpid()
            self._pool = ThreadPoolExecutor(
                max_workers=concurrency(), thread_name_prefix=f"impri-{self.name}"
            )
            self._kicker = ThreadPoolExecutor(
                max_workers=1, thread_name_prefix=f"impri-{self.name}-sweep"
            )
            self._client = outbound.client(self.user_agent)
            self.active.clear()
            self.claimed.clear()
            self._kick_pending = False

    def client(self) -> httpx.Client:
        with self.lock:
            self._fresh()
            return self._client

    # --- Claims ------------------------------------------------------------------------

    def saturated(self, prefix: str) -> list[str]:
        """Keys starting with ``prefix`` that have no room left (to leave out of a query)."""
        limit = per_destination()
        with self.lock:
            return [
                k.removeprefix(prefix)
                for k, n in self.active.items()
                if n >= limit and k.startswith(prefix)
            ]

    def claimed_now(self) -> list:
        with self.lock:
            return list(self.claimed)

    def in_flight(self) -> Counter[str]:
        with self.lock:
            return Counter(self.active)

    def claim(
        self, rows: list[Row], most: int, skip: set[str], background: bool = False
    ) -> list[Row]:
        """Claim rows in order while their keys have room; at most ``most``."""
        limit = per_destination()
        picked: list[Row] = []
        left = False
        with self.lock:
            self._fresh()
            for pk, keys in rows:
                if len(picked) >= most:
                    left = True
                    break
                if (background and pk in self.claimed) or skip.intersection(keys):
                    continue
                if any(self.active[k] >= limit for k in keys):
                    left = True
                    continue
                if background:
                    self.claimed.add(pk)
                for k in keys:
                    self.active[k] += 1
                picked.append((pk, keys))
            if background:
                self.left_behind = left
        return picked

    def release(self, pk, keys: tuple[str, ...]) -> None:
        with self.lock:
            self.claimed.discard(pk)
            for k in keys:
                self.active[k] -= 1
                if self.active[k] <= 0:
                    del self.active[k]
            again = self.left_behind and self.sweeper is not None
        if again:
            self.kick()

    # --- Running -------------------------------------------------------------------------

    def sweep(
        self,
        read: Callable[[list, int], list[Row]],
        send: Callable[[object, bool], str],
        *,
        limit: int,
        background: bool,
    ) -> int:
        """Claim and send due rows; inline: attempts made, background: rows handed to threads.

        ``read(claimed, n)`` returns up to ``n`` due rows (pk, keys) oldest
        first, leaving out ``claimed``; ``send(pk, background)`` makes one
        attempt and returns an outcome.
        """
        if background:
            rows = fair_order(read(self.claimed_now(), limit * 4), self.in_flight())
            picked = self.claim(rows, limit, set(), background=True)
            for pk, keys in picked:
                self._pool.submit(self._run, send, pk, keys)
            return len(picked)
        attempted, unreachable, rounds = 0, set(), 0
        while attempted < limit and rounds < limit:
            rounds += 1
            rows = fair_order(read([], (limit - attempted) * 4), self.in_flight())
            picked = self.claim(rows, limit - attempted, unreachable)
            if not picked:
                break
            for pk, keys in picked:
                if keys[0] in unreachable:
                    self.release(pk, keys)
                    continue
                try:
                    outcome = send(pk, False)
                finally:
                    self.release(pk, keys)
                if outcome != BUSY:
                    attempted += 1
                if outcome == UNREACHABLE:
                    unreachable.add(keys[0])  # one try per dead destination per sweep
        return attempted

    def _run(self, send, pk, keys) -> None:
        try:
            send(pk, True)
        except Exception:
            logger.exception("%s: sending %s failed unexpectedly", self.name, pk)
        finally:
            connection.close()  # a pooled PostgreSQL connection goes back at once
            self.release(pk, keys)

    def kick(self) -> None:
        """Run a background sweep soon (coalesced): room was made for rows left behind."""
        with self.lock:
            if self._kick_pending or self.sweeper is None:
                return
            self._fresh()
            self._kick_pending = True
            kicker = self._kicker
        kicker.submit(self._kicked)

    def _kicked(self) -> None:
        with self.lock:
            self._kick_pending = False
        try:
            self.sweeper()
        except Exception:
            logger.exception("%s: a follow-up sweep failed; the next tick runs one", self.name)
        finally:
            connection.close()
