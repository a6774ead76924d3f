"""Appending to and verifying the audit chain."""

from __future__ import annotations

import hashlib
import hmac
import threading
from collections.abc import Iterable
from contextlib import contextmanager
from dataclasses import dataclass

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from .models import GENESIS_HASH, AuditEvent, ChainHead, canonical_json, format_at

_local = threading.local()


def in_own_transaction() -> bool:
    """True inside an atomic block that the calling code opened.

    A test case's enclosing blocks (Django marks them ``_from_testcase``) do not
    count, so a service that forgot its transaction fails under test exactly as
    it would in production.
    """
    return any(
        not getattr(block, "_from_testcase", False)
        for block in transaction.get_connection().atomic_blocks
    )


def record(
    event: str, *, actor_type: str, actor_id: str, action_id: str = "", data: dict | None = None
) -> AuditEvent:
    """Append one event. Must run inside the transaction of the change it records.

    Inside :func:`batch` the event is queued and appended with the block's
    other events when the block ends (still inside the transaction); the
    returned object gets its ``seq`` and ``hash`` then. Outside a batch it is
    appended at once.
    """
    if not in_own_transaction():
        raise RuntimeError(
            "audit.record() must run inside the transaction of the change it records"
        )
    entry = AuditEvent(
        actor_type=actor_type,
        actor_id=actor_id,
        action_id=action_id,
        event=event,
        data=data or {},
    )
    buffers = getattr(_local, "buffers", None)
    if buffers:
        buffers[-1].append(entry)
    else:
        _append([entry])
    return entry


@contextmanager
def batch():
    """Queue the block's events and append them together as it ends, under one lock.

    Use it just inside the transaction: ``with transaction.atomic(), audit.batch():``.
    The chain's head row is then locked for the last moment of the transaction
    only, not from its first event to its commit, so concurrent changes queue
    on it for one short statement group. If the block raises, its events are
    dropped with the transaction that rolls back.
    """
    buffers = _local.__dict__.setdefault("buffers", [])
    buffer: list[AuditEvent] = []
    buffers.append(buffer)
    try:
        yield
    finally:
        buffers.pop()
    if not buffer:
        return
    if buffers:  # nested: the outer block appends
        buffers[-1].extend(buffer)
    else:
        _append(buffer)


def _append(entries: list[AuditEvent]) -> None:
    """Chain ``entries`` after the head and insert them.

    1. Lock the chain head in a statement of its own (``SELECT … FOR UPDATE``);
       on SQLite the IMMEDIATE transaction already holds the write lock.
    2. Chain each event to the previous hash and insert them in one statement.
    3. Move the head. Concurrent writers queue on step 1, so no two events
       ever share a ``prev_hash``.
    """
    connection = transaction.get_connection()
    table = connection.ops.quote_name(ChainHead._meta.db_table)
    # Plain SQL for the two statements every audited change runs under the lock:
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
        AuditEvent.objects.bulk_create(entries)
        cursor.execute(f"UPDATE {table} SET seq = %s, hash = %s WHERE id = 1", [seq, prev_hash])


@dataclass(frozen=True)
class Verification:
    ok: bool
    checked: int
    first_broken_seq: int | None = None
    problem: str = ""
    last_seq: int = 0


def verify(*, checkpoints: list[dict] = (), batch_size: int = 2000) -> Verification:
    """Recompute the stored chain from the start; name the first broken link."""
    return verify_events(
        AuditEvent.objects.order_by("seq").iterator(chunk_size=batch_size), checkpoints=checkpoints
    )


def verify_events(events: Iterable[AuditEvent], *, checkpoints: list[dict] = ()) -> Verification:
    """Check a chain given in stored order.

    Each event must follow the previous one (seq + 1), carry the previous
    event's hash, and hash to its own ``hash``. Signed checkpoints (see
    :func:`make_checkpoint`) pin ``hash`` at ``seq``: a chain that was cut
    short, or rewritten from the start, fails them.
    """
    pins = {}
    for checkpoint in checkpoints:
        if not checkpoint_signature_ok(checkpoint):
            return Verification(False, 0, checkpoint.get("seq"), "checkpoint signature is invalid")
        pins[checkpoint["seq"]] = checkpoint["hash"]
    prev_hash, expected_seq, checked = GENESIS_HASH, 1, 0
    for entry in events:
        problem = _link_problem(entry, expected_seq, prev_hash)
        if not problem and entry.seq in pins and pins[entry.seq] != entry.hash:
            problem = "differs from the signed checkpoint: the chain was rewritten"
        if problem:
            return Verification(
                False,
                checked,
                expected_seq if "missing" in problem else entry.seq,
                problem,
                checked,
            )
        prev_hash, expected_seq, checked = entry.hash, expected_seq + 1, checked + 1
    beyond = [seq for seq in pins if seq >= expected_seq]
    if beyond:
        problem = f"the chain ends at #{checked} but a signed checkpoint pins #{max(beyond)}: it was truncated"
        return Verification(False, checked, expected_seq, problem, checked)
    return Verification(True, checked, last_seq=checked)


def _link_problem(entry: AuditEvent, expected_seq: int, prev_hash: str) -> str:
    if entry.seq > expected_seq:
        return f"event #{expected_seq} is missing"
    if entry.seq < expected_seq:
        return f"event #{entry.seq} is out of order or duplicated (expected #{expected_seq})"
    if entry.prev_hash != prev_hash:
        return "prev_hash does not match the previous event's hash"
    if entry.compute_hash() != entry.hash:
        return "hash does not match the event's content"
    return ""


# --- Signed checkpoints ---------------------------------------------------------------


def _checkpoint_key() -> bytes:
    return (settings.IMPRI_AUDIT_CHECKPOINT_KEY or settings.SECRET_KEY).encode()


def _sign(body: dict) -> str:
    return hmac.new(_checkpoint_key(), canonical_json(body), hashlib.sha256).hexdigest()


def make_checkpoint() -> dict | None:
    """``{seq, hash, at, signature}`` for the chain head, HMAC-SHA256 signed; None for an empty chain.

    Kept outside the database (a file, a ticket, an email), it lets a later
    verify detect truncation and a rewrite of the whole chain.
    """
    head = AuditEvent.objects.order_by("-seq").first()
    if head is None:
        return None
    body = {"seq": head.seq, "hash": head.hash, "at": format_at(timezone.now())}
    return {**body, "signature": _sign(body)}


def checkpoint_signature_ok(checkpoint: dict) -> bool:
    try:
        body = {
            "seq": int(checkpoint["seq"]),
            "hash": str(checkpoint["hash"]),
            "at": str(checkpoint["at"]),
        }
        return hmac.compare_digest(_sign(body), str(checkpoint["signature"]))
    except (KeyError, TypeError, ValueError):
        return False
