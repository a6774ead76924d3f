"""Appending events to the chain: the one place it is done, under the head's lock.

Every audited change appends its events at the end of its transaction: it locks the
chain's one head row (``select_for_update``; on SQLite the ``IMMEDIATE`` transaction
already holds the database's write lock), stamps and chains the events in Python
(:meth:`AuditEvent.compute_hash`, the same code ``verify`` runs), inserts them with
``bulk_create`` and moves the head. The lock is held until the transaction commits, so
the time from taking it to the commit bounds how many changes a second the whole
deployment can make (``docs/benchmarks.md``, pushes).

The append-only triggers (``audit.guards``) refuse any UPDATE or DELETE of an event,
and a head that moves back, on both databases.
"""

from __future__ import annotations

from django.utils import timezone

from .models import AuditEvent, ChainHead


def append(entries: list[AuditEvent]) -> None:
    """Chain ``entries`` after the head and insert them; each gets its seq, at and hashes.

    Concurrent writers queue on the head's lock, so no two events ever share a
    ``prev_hash``.
    """
    if not entries:
        return
    seq, prev_hash = _locked_head()
    at = timezone.now()  # stamped under the lock: times never go back along the chain
    for entry in entries:
        seq += 1
        entry.seq, entry.at, entry.prev_hash = seq, at, prev_hash
        entry.hash = prev_hash = entry.compute_hash()
    AuditEvent.objects.bulk_create(entries)
    ChainHead.objects.filter(pk=1).update(seq=seq, hash=prev_hash)


def _locked_head() -> tuple[int, str]:
    """The head's (seq, hash), its row locked until the commit."""
    locked = ChainHead.objects.select_for_update().filter(pk=1).values_list("seq", "hash")
    for row in locked[:1]:
        return row
    ChainHead.objects.get_or_create(pk=1)  # the first event of a new database
    return locked.get()
