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

from compat.django import in_code_atomic_block

from . import chain
from .models import (
    CURRENT_SCHEME,
    GENESIS_HASH,
    AuditEvent,
    ChainHead,
    VerificationRun,
    canonical_json,
    format_at,
)

_local = threading.local()


def in_own_transaction() -> bool:
    """True inside an atomic block that the calling code opened.

    A test case's enclosing blocks (Django marks them ``_from_testcase``) do not
    count, so a service that forgot its transaction fails under test exactly as
    it would in production.
    """
    return in_code_atomic_block(transaction.get_connection())


def record(
    event: str,
    *,
    actor_type: str,
    actor_id: str,
    actor_ref: str = "",
    action_id: str = "",
    data: dict | None = None,
) -> AuditEvent:
    """Append one event. Must run inside the transaction of the change it records.

    ``actor_id`` is the actor's display name at the time; ``actor_ref`` its
    stable identity (``agent:<pk>``, ``user:<pk>``), which a rename never changes.

    Inside :func:`batch` the event is queued and appended with the block's
    other events when the block ends (still inside the transaction); the
    returned object gets its ``seq`` and ``hash`` then. Outside a batch it is
    appended at once.
    """
    if not in_own_transaction():
        raise RuntimeError(
            "audit.record() must run inside the transaction of the change it records"
        )
    extra = {k: v for layer in getattr(_local, "context", ()) for k, v in layer.items()}
    entry = AuditEvent(
        scheme=CURRENT_SCHEME,
        actor_type=actor_type,
        actor_id=actor_id,
        actor_ref=actor_ref,
        action_id=action_id,
        event=event,
        data={**(data or {}), **extra},
    )
    buffers = getattr(_local, "buffers", None)
    if buffers:
        buffers[-1].append(entry)
    else:
        chain.append([entry])
    return entry


@contextmanager
def context(**data):
    """Add ``data`` to every event recorded in the block, on this thread.

    Where a change came from, when the service that records it does not know:
    the Slack app decides through ``services.decide`` inside
    ``context(via="slack", slack_user_id=…)``, so its review and settle events say so.
    """
    layers = _local.__dict__.setdefault("context", [])
    layers.append(dict(data))
    try:
        yield
    finally:
        layers.pop()


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
        chain.append(buffer)


@dataclass(frozen=True)
class Verification:
    ok: bool
    checked: int
    first_broken_seq: int | None = None
    problem: str = ""
    last_seq: int = 0
    last_hash: str = GENESIS_HASH
    from_seq: int = 0


@dataclass(frozen=True)
class Anchor:
    """Where a verification starts: event ``seq`` is known to hash to ``hash`` (0: the genesis)."""

    seq: int = 0
    hash: str = GENESIS_HASH


def verify(
    *,
    checkpoints: list[dict] = (),
    since: Anchor | None = None,
    batch_size: int = 2000,
    progress=None,
) -> Verification:
    """Recompute the stored chain from ``since`` (default: the start) to its head.

    1. Read the chain head (the seq and hash every append moves under its lock).
    2. Check that the anchor event still holds the anchor's hash.
    3. Check every event after it up to the head (see :func:`verify_events`).
    4. The chain must end exactly at the head: fewer events means the tail
       was cut; events beyond the head were inserted behind the lock's back.
    """
    since = since or Anchor()
    head = _head()
    scheme = 1
    if since.seq:
        anchor = AuditEvent.objects.filter(seq=since.seq).first()
        if anchor is None:
            return _broken(0, since.seq, f"event #{since.seq} (a verified checkpoint) is missing")
        if anchor.hash != since.hash:
            return _broken(
                0, since.seq, f"event #{since.seq} no longer holds its verified hash: rewritten"
            )
        scheme = anchor.scheme
    events = (
        AuditEvent.objects.filter(seq__gt=since.seq, seq__lte=head[0])
        .order_by("seq")
        .iterator(chunk_size=batch_size)
    )
    if progress is not None:  # impri audit verify's bar: progress(events, how many) -> events
        events = progress(events, head[0] - since.seq)
    result = verify_events(events, checkpoints=checkpoints, start=since, head=head, scheme=scheme)
    if result.ok:
        return _beyond_head(result)
    return result


def _head() -> tuple[int, str]:
    row = ChainHead.objects.filter(pk=1).values_list("seq", "hash").first()
    return row or (0, GENESIS_HASH)


def _beyond_head(result: Verification) -> Verification:
    """Events past the head, once the head has been read again (appends move both together)."""
    highest = AuditEvent.objects.order_by("-seq").values_list("seq", flat=True).first() or 0
    head_seq = _head()[0]
    if highest > head_seq:
        problem = f"event #{head_seq + 1} lies beyond the chain head (#{head_seq}): inserted"
        return _broken(result.checked, head_seq + 1, problem, result.from_seq)
    return result


def _broken(checked: int, seq: int | None, problem: str, from_seq: int = 0) -> Verification:
    return Verification(False, checked, seq, problem, from_seq + checked, from_seq=from_seq)


def verify_events(
    events: Iterable[AuditEvent],
    *,
    checkpoints: list[dict] = (),
    start: Anchor | None = None,
    head: tuple[int, str] | None = None,
    scheme: int = 1,
) -> Verification:
    """Check a chain given in stored order, from ``start`` on.

    Each event must follow the previous one (seq + 1), carry the previous
    event's hash, hash to its own ``hash`` under its scheme, and never go back
    to an older hash scheme. Signed checkpoints (see :func:`make_checkpoint`)
    pin ``hash`` at ``seq``: a chain that was cut short, or rewritten from the
    start, fails them. With ``head`` (the chain head's seq and hash), the
    chain must end exactly there.
    """
    start = start or Anchor()
    pins = {}
    for checkpoint in checkpoints:
        if not checkpoint_signature_ok(checkpoint):
            return _broken(0, checkpoint.get("seq"), "checkpoint signature is invalid", start.seq)
        pins[int(checkpoint["seq"])] = checkpoint["hash"]
    if start.seq in pins and pins[start.seq] != start.hash:
        return _broken(0, start.seq, "differs from the signed checkpoint: the chain was rewritten")
    prev_hash, expected_seq, checked = start.hash, start.seq + 1, 0
    for entry in events:
        problem = _link_problem(entry, expected_seq, prev_hash, scheme)
        if not problem and entry.seq in pins and pins[entry.seq] != entry.hash:
            problem = "differs from the signed checkpoint: the chain was rewritten"
        if problem:
            broken = expected_seq if "missing" in problem else entry.seq
            return _broken(checked, broken, problem, start.seq)
        prev_hash, expected_seq, checked = entry.hash, expected_seq + 1, checked + 1
        scheme = entry.scheme
    last_seq = expected_seq - 1
    beyond = [seq for seq in pins if seq >= expected_seq]
    if beyond:
        problem = f"the chain ends at #{last_seq} but a signed checkpoint pins #{max(beyond)}: it was truncated"
        return _broken(checked, expected_seq, problem, start.seq)
    if head is not None and head[0] > last_seq:
        problem = f"the chain ends at #{last_seq} but its head says #{head[0]}: the tail was cut"
        return _broken(checked, expected_seq, problem, start.seq)
    if head is not None and head[0] == last_seq and head[1] != prev_hash:
        problem = "the last event's hash differs from the chain head's: the tail was rewritten"
        return _broken(checked, last_seq, problem, start.seq)
    return Verification(True, checked, last_seq=last_seq, last_hash=prev_hash, from_seq=start.seq)


def _link_problem(entry: AuditEvent, expected_seq: int, prev_hash: str, scheme: int) -> str:
    if entry.seq > expected_seq:
        return f"event #{expected_seq} is missing"
    if entry.seq < expected_seq:
        return f"event #{entry.seq} is out of order or duplicated (expected #{expected_seq})"
    if entry.prev_hash != prev_hash:
        return "prev_hash does not match the previous event's hash"
    if entry.scheme not in (1, CURRENT_SCHEME):
        return f"unknown hash scheme {entry.scheme}"
    if entry.scheme < scheme:
        return f"hash scheme goes back from {scheme} to {entry.scheme}"
    if not entry.hash_matches():
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


# --- Routine, checkpoint and full verifications -----------------------------------------


def _sign_run(run: VerificationRun) -> str:
    return _sign({"seq": run.to_seq, "hash": run.to_hash, "at": format_at(run.finished_at)})


def last_verified(limit: int = 20) -> Anchor:
    """The furthest point a past verification proved, if its signature holds; else the genesis.

    A run row forged in the database fails its HMAC (the key is not in the
    database) and is passed over, so a forger cannot make routine checks skip
    events they changed.
    """
    # Only runs that were themselves anchored back to the genesis: a caller's
    # checkpoint attests a hash at a seq, not that the events before it were checked.
    runs = VerificationRun.objects.filter(
        ok=True,
        to_seq__gt=0,
        kind__in=(VerificationRun.Kind.ROUTINE, VerificationRun.Kind.FULL),
    ).order_by("-to_seq", "-pk")
    for run in runs[:limit]:
        if run.finished_at and hmac.compare_digest(_sign_run(run), run.signature):
            return Anchor(run.to_seq, run.to_hash)
    return Anchor()


def verify_routine(*, by: str = "") -> Verification:
    """From the last verified checkpoint to the head: a routine call costs only the new events."""
    anchor = last_verified()
    result = verify(since=anchor)
    if not result.ok and anchor.seq:
        # The anchor itself may be what was broken: say where, from the start.
        full = verify()
        result = full if not full.ok else result
    _remember(VerificationRun.Kind.ROUTINE, result, by=by, new_only=True)
    return result


def verify_checkpoint(checkpoint: dict, *, by: str = "") -> Verification:
    """The chain still holds a caller's signed checkpoint, and runs intact from it to the head."""
    if not checkpoint_signature_ok(checkpoint):
        return _broken(0, None, "checkpoint signature is invalid")
    result = verify(since=Anchor(int(checkpoint["seq"]), str(checkpoint["hash"])))
    _remember(VerificationRun.Kind.CHECKPOINT, result, by=by, new_only=True)
    return result


def _remember(kind: str, result: Verification, *, by: str, new_only: bool) -> None:
    """Keep a run that proved something new, or a failure not already on record."""
    latest = VerificationRun.objects.filter(status=VerificationRun.Status.DONE, kind=kind)
    latest = latest.order_by("-pk").first()
    if new_only and latest is not None:
        if result.ok and latest.ok and latest.to_seq >= result.last_seq:
            return
        if (
            not result.ok
            and latest.ok is False
            and (latest.first_broken_seq, latest.problem)
            == (
                result.first_broken_seq,
                result.problem,
            )
        ):
            return
    run = VerificationRun(kind=kind, requested_by=by, requested_at=timezone.now())
    _finish(run, result)


def _finish(run: VerificationRun, result: Verification) -> None:
    run.status = VerificationRun.Status.DONE
    run.finished_at = timezone.now()
    run.ok = result.ok
    run.checked = result.checked
    run.first_broken_seq = result.first_broken_seq
    run.problem = result.problem
    run.from_seq = result.from_seq
    if result.ok:
        run.to_seq, run.to_hash = result.last_seq, result.last_hash
        run.signature = _sign_run(run) if run.to_seq else ""
    run.save()


def request_full_verification(*, by: str) -> VerificationRun:
    """Queue a re-verification of the whole chain from the genesis; a background sweep runs it."""
    run = VerificationRun.objects.create(
        kind=VerificationRun.Kind.FULL,
        status=VerificationRun.Status.QUEUED,
        requested_by=by,
        requested_at=timezone.now(),
    )
    transaction.on_commit(_nudge)
    return run


def _nudge() -> None:
    if settings.CELERY_TASK_ALWAYS_EAGER:
        return  # embedded mode: the in-process ticker's slow sweep picks it up
    try:
        from .tasks import run_full_verifications  # here: tasks imports this module

        run_full_verifications.delay()
    except Exception:  # noqa: BLE001 - beat runs the sweep anyway
        pass


def run_full_verifications() -> int:
    """Run every queued full verification (idempotent: each is claimed by a conditional UPDATE).

    A full run checks every event from the genesis, against the chain head and
    against every signed checkpoint earlier runs left, so a rewrite of the whole
    chain with recomputed hashes fails it.
    """
    done = 0
    for run in VerificationRun.objects.filter(status=VerificationRun.Status.QUEUED).order_by("pk"):
        claimed = VerificationRun.objects.filter(
            pk=run.pk, status=VerificationRun.Status.QUEUED
        ).update(status=VerificationRun.Status.RUNNING)
        if not claimed:
            continue
        _finish(run, verify(checkpoints=_stored_checkpoints()))
        done += 1
    return done


def verify_full_now(*, by: str, checkpoints: list[dict] = (), progress=None) -> Verification:
    """A full verification run here and now (``impri audit verify``), recorded like a queued one."""
    result = verify(checkpoints=[*checkpoints, *_stored_checkpoints()], progress=progress)
    run = VerificationRun(
        kind=VerificationRun.Kind.FULL, requested_by=by, requested_at=timezone.now()
    )
    _finish(run, result)
    return result


def _stored_checkpoints(limit: int = 1000) -> list[dict]:
    pins = []
    runs = VerificationRun.objects.filter(ok=True, to_seq__gt=0).order_by("-to_seq")[:limit]
    for run in runs:
        pin = {"seq": run.to_seq, "hash": run.to_hash, "at": format_at(run.finished_at)}
        pin["signature"] = run.signature
        if checkpoint_signature_ok(pin):
            pins.append(pin)
    return pins
