"""Appending to and verifying the audit chain."""

from __future__ import annotations

from dataclasses import dataclass

from django.db import transaction
from django.utils import timezone

from .models import GENESIS_HASH, AuditEvent, ChainHead


def record(
    event: str, *, actor_type: str, actor_id: str, action_id: str = "", data: dict | None = None
) -> AuditEvent:
    """Append one event. Must run inside the transaction of the change it records.

    1. Lock the chain head in a statement of its own (``SELECT … FOR UPDATE``);
       on SQLite the IMMEDIATE transaction already holds the write lock.
    2. Chain the new event to the head's hash and insert it.
    3. Move the head. Concurrent writers queue on step 1, so no two events
       ever share a ``prev_hash``.
    """
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError(
            "audit.record() must run inside the transaction of the change it records"
        )
    head = ChainHead.objects.select_for_update().filter(pk=1).first()
    if head is None:
        ChainHead.objects.get_or_create(pk=1)
        head = ChainHead.objects.select_for_update().get(pk=1)
    entry = AuditEvent(
        seq=head.seq + 1,
        at=timezone.now(),
        actor_type=actor_type,
        actor_id=actor_id,
        action_id=action_id,
        event=event,
        data=data or {},
        prev_hash=head.hash,
    )
    entry.hash = entry.compute_hash()
    entry.save(force_insert=True)
    ChainHead.objects.filter(pk=1).update(seq=entry.seq, hash=entry.hash)
    return entry


@dataclass(frozen=True)
class Verification:
    ok: bool
    checked: int
    first_broken_seq: int | None = None
    problem: str = ""


def verify(batch_size: int = 2000) -> Verification:
    """Recompute the chain from the start; name the first broken link."""
    prev_hash = GENESIS_HASH
    expected_seq = 1
    checked = 0
    for entry in AuditEvent.objects.order_by("seq").iterator(chunk_size=batch_size):
        if entry.seq != expected_seq:
            return Verification(False, checked, expected_seq, f"event #{expected_seq} is missing")
        if entry.prev_hash != prev_hash:
            return Verification(
                False, checked, entry.seq, "prev_hash does not match the previous event's hash"
            )
        if entry.compute_hash() != entry.hash:
            return Verification(
                False, checked, entry.seq, "hash does not match the event's content"
            )
        prev_hash = entry.hash
        expected_seq += 1
        checked += 1
    return Verification(True, checked)
