"""A *generation*: a random token in the shared ``keys`` cache that tells every process
when what it cached was changed by any of them.

A process keeps what it read tagged with the generation it read first; a change replaces
the token (``Generation.changed``), before and again after its commit, so every process
reads again from its next request on. The ``keys`` cache is the one every process of a
deployment shares: Redis in the scaled mode, a file in the data directory in the embedded
mode. When it can't be read (Redis away), ``current`` answers None and calls ``forget``:
nothing is served from a process's cache until it can be read again.

Used by the key check (``identity.keys``) and the reviewer groups (``approvals.group_cache``).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable

from django.core.cache import caches
from django.db import transaction

from plumbing import fallbacks


class Generation:
    def __init__(self, name: str, *, forget: Callable[[], None], unread: str, unsent: str) -> None:
        """``name`` is the cache key; ``forget`` empties this process's cache; ``unread`` and
        ``unsent`` say in the faults log what happens when the token can't be read or
        replaced."""
        self.name = name
        self.forget = forget
        self.unread = unread
        self.unsent = unsent

    def current(self) -> str | None:
        """The token now; None (and this process's cache emptied) when it can't be read."""
        try:
            store = caches["keys"]  # a file cache's folder is made here: it can fail too
            found = store.get(self.name)
            if found is None:
                store.add(self.name, secrets.token_hex(8), timeout=None)
                found = store.get(self.name)
        except Exception as exc:
            fallbacks.note("cache", self.unread, exc)
            found = None
        if found is None:
            self.forget()
        return found

    def replace(self) -> None:
        self.forget()
        try:
            caches["keys"].set(self.name, secrets.token_hex(8), timeout=None)
        except Exception as exc:
            fallbacks.note("cache", self.unsent, exc)

    def changed(self, using: str = "default") -> None:
        """What the cache holds changed: every process reads it again.

        Now, and once more after the commit (a read between the two saw the rows as they were).
        """
        self.replace()
        if transaction.get_connection(using).in_atomic_block:
            transaction.on_commit(self.replace, using=using)
