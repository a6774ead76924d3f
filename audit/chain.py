"""Appending events to the chain: under the head's lock, as briefly as the database allows.

Every audited change appends its events at the end of its transaction, and every
append locks the chain's one head row until the transaction commits. So the
time from taking that lock to the commit bounds how many changes a second the
whole deployment can make (``docs/benchmarks.md``, pushes).

- **PostgreSQL**: one call of the ``impri_audit_append`` function (its SQL is in
  migration ``audit/migrations/0004_append_function.py``, the one place it is
  written: a change to it is a new migration) locks the head, stamps, chains and inserts the
  events and moves the head, inside the database. The lock is then held for
  that one round trip and the commit's, and never while the process waits for
  its interpreter lock between statements. Python prepares each event's
  encoding before (:meth:`AuditEvent.hash_parts`); the database fills in the
  time and the sequence number it takes under the lock and hashes with
  ``sha256``. ``verify`` recomputes every hash in Python.
- **SQLite**: the transaction already holds the database's write lock
  (``BEGIN IMMEDIATE``), so Python chains the events and inserts them.
"""

from __future__ import annotations

import hashlib

from django.db import transaction
from django.utils import timezone

from compat.django import prepared_cursor

from .models import AuditEvent, ChainHead, canonical_json, format_at


def append(entries: list[AuditEvent]) -> None:
    """Chain ``entries`` after the head and insert them; each gets its seq, at and hashes.

    Concurrent writers queue on the head's lock, so no two events ever share a
    ``prev_hash``.
    """
    if not entries:
        return
    connection = transaction.get_connection()
    if connection.vendor == "postgresql":
        _append_in_database(connection, entries)
    else:
        _append_here(connection, entries)


def _append_in_database(connection, entries: list[AuditEvent]) -> None:
    # One JSON document for all the events: one parameter to send, not one array per column.
    # The encodings are UTF-8 text, so they travel as JSON strings.
    parts = [entry.hash_parts() for entry in entries]
    document = []
    for entry, (head, tail) in zip(entries, parts, strict=True):
        document.append(
            {
                "head": head.decode(),
                "tail": tail.decode(),
                "scheme": entry.scheme,
                "actor_type": entry.actor_type,
                "actor_id": entry.actor_id,
                "actor_ref": entry.actor_ref,
                "action_id": entry.action_id,
                "event": entry.event,
                "data": entry.data,
            }
        )
    data = AuditEvent._meta.get_field("data")
    with prepared_cursor(connection) as cursor:
        cursor.execute(
            "SELECT out_seq, out_at, out_prev_hash, out_hash FROM impri_audit_append(%s::jsonb)"
            " ORDER BY out_seq",
            [data.get_db_prep_save(document, connection)],
        )
        rows = cursor.fetchall()
    for entry, (head, tail), (seq, at, prev_hash, hash_) in zip(entries, parts, rows, strict=True):
        # The database hashed what Python meant it to, or the transaction rolls back: an
        # event the triggers keep forever must never fail verification for a formatting slip.
        body = head + canonical_json(format_at(at)) + tail + str(seq).encode() + b"}"
        if hashlib.sha256(prev_hash.encode("ascii") + body).hexdigest() != hash_:
            raise RuntimeError(f"impri_audit_append hashed event #{seq} unlike Python")
        entry.seq, entry.at, entry.prev_hash, entry.hash = seq, at, prev_hash, hash_


def _append_here(connection, entries: list[AuditEvent]) -> None:
    """Lock the head in a statement of its own, chain in Python, insert, move the head.

    On SQLite the IMMEDIATE transaction already holds the write lock.
    """
    table = connection.ops.quote_name(ChainHead._meta.db_table)
    # Plain SQL for the statements every audited change runs under the lock:
    # the ORM's per-query compilation costs more than the statements themselves.
    lock = f"SELECT seq, hash FROM {table} WHERE id = 1"
    if connection.features.has_select_for_update:
        lock += " FOR UPDATE"
    with connection.cursor() as cursor:
        cursor.execute(lock)
        row = cursor.fetchone()
        if row is None:
            ChainHead.objects.get_or_create(pk=1)
            cursor.execute(lock)
            row = cursor.fetchone()
        seq, prev_hash = row
        at = timezone.now()
        for entry in entries:
            seq += 1
            entry.seq, entry.at, entry.prev_hash = seq, at, prev_hash
            entry.hash = prev_hash = entry.compute_hash()
        _insert(cursor, connection, entries)
        cursor.execute(f"UPDATE {table} SET seq = %s, hash = %s WHERE id = 1", [seq, prev_hash])


def _insert(cursor, connection, entries: list[AuditEvent]) -> None:
    """``bulk_create`` without the ORM's compilation: multi-row INSERTs.

    Each value is prepared by its field (``get_db_prep_save``), as ``bulk_create``
    does: ``at`` as the backend's datetime, ``data`` as its JSON. Batches are the
    backend's size (SQLite's limit on parameters), as ``bulk_create``'s are.
    """
    fields = AuditEvent._meta.concrete_fields
    quote = connection.ops.quote_name
    columns = ", ".join(quote(field.column) for field in fields)
    row = "(" + ", ".join(["%s"] * len(fields)) + ")"
    size = max(1, connection.ops.bulk_batch_size(fields, entries))
    for start in range(0, len(entries), size):
        batch = entries[start : start + size]
        cursor.execute(
            f"INSERT INTO {quote(AuditEvent._meta.db_table)} ({columns}) VALUES "
            + ", ".join([row] * len(batch)),
            [
                field.get_db_prep_save(getattr(entry, field.attname), connection)
                for entry in batch
                for field in fields
            ],
        )
