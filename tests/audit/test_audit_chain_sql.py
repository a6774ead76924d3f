"""The chain's append, in Python on both databases, and the chains PostgreSQL appended before.

Until issue 41, PostgreSQL stamped, chained and hashed the events inside the database
(``impri_audit_append``, migration 0004, dropped by 0005) from an encoding Python split
around ``at`` and ``seq``. Now ``audit.chain.append`` does it in Python everywhere; the
chains the function wrote must still verify, and the split encoding it hashed must be
the canonical one for any event.
"""

from __future__ import annotations

import importlib
import json
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from audit import log as audit_log
from audit.models import CURRENT_SCHEME, AuditEvent, ChainHead, canonical_json, format_at


def hash_parts(entry: AuditEvent) -> tuple[bytes, bytes]:
    """The encoding migration 0004's function hashed: split around ``at`` and ``seq``.

    ``head + canonical_json(format_at(at)) + tail + str(seq) + "}"``: the keys sort as
    ``action_id, actor_id, actor_ref, actor_type`` < ``at`` < ``data, event, scheme`` < ``seq``.
    """
    fields = {k: v for k, v in entry.hashed_fields().items() if k not in ("at", "seq")}
    before = canonical_json({k: v for k, v in fields.items() if k < "at"})
    after = canonical_json({k: v for k, v in fields.items() if k > "at"})
    return before[:-1] + b',"at":', b"," + after[1:-1] + b',"seq":'


# Strings PostgreSQL's text columns and UTF-8 accept (no NUL, no lone surrogate), as every
# input path guarantees.
texts = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=40
)

# JSON values as agents send them: every kind of string, exact and inexact numbers, nesting.
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**25), max_value=10**25)
    | st.floats(allow_nan=False, allow_infinity=False)
    | texts,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(texts, children, max_size=4),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=st.dictionaries(texts, json_values, max_size=5),
    actor_id=texts,
    actor_ref=texts,
    action_id=texts,
    event=texts,
    seq=st.integers(min_value=1, max_value=2**62),
    micros=st.integers(min_value=0, max_value=10**17),
)
def test_the_split_encoding_is_the_canonical_one(
    data, actor_id, actor_ref, action_id, event, seq, micros
):
    entry = AuditEvent(
        scheme=CURRENT_SCHEME,
        actor_type="agent",
        actor_id=actor_id,
        actor_ref=actor_ref,
        action_id=action_id,
        event=event,
        data=data,
    )
    entry.seq, entry.at = 0, datetime(1970, 1, 1, tzinfo=UTC)
    head, tail = hash_parts(entry)
    entry.seq = seq
    entry.at = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=micros)
    assembled = head + canonical_json(format_at(entry.at)) + tail + str(seq).encode() + b"}"
    assert assembled == canonical_json(entry.hashed_fields())


TRICKY = [
    {"amount": 8400, "rate": 0.1, "big": 10**22, "tiny": 1e-7, "neg_zero": -0.0},
    {"text": 'é \u2028 \u2029 \U0001f4b8 "quoted" back\\slash \t tab </script>'},
    {"nested": {"b": [1, {"z": None, "a": True}], "a": "x"}, "": "empty key"},
    {},
]


@pytest.mark.django_db(transaction=True)
def test_appended_events_verify_and_chain_in_order():
    with transaction.atomic(), audit_log.batch():
        recorded = [
            audit_log.record(
                "test.tricky",
                actor_type="agent",
                actor_id="bot \u00e9",
                actor_ref="agent:1",
                action_id=f"act_{i}",
                data=data,
            )
            for i, data in enumerate(TRICKY)
        ]
    with transaction.atomic():  # a second transaction continues the chain
        later = audit_log.record("test.later", actor_type="system", actor_id="system")

    stored = list(AuditEvent.objects.order_by("seq"))
    assert [e.seq for e in stored] == list(range(1, len(TRICKY) + 2))
    # What record() returned is what was stored: seq, time and both hashes.
    for entry, row in zip([*recorded, later], stored, strict=True):
        assert (entry.seq, entry.at, entry.prev_hash, entry.hash) == (
            row.seq,
            row.at,
            row.prev_hash,
            row.hash,
        )
        assert row.hash_matches()
    assert len({e.at for e in stored[: len(TRICKY)]}) == 1  # one transaction, one stamp
    assert stored[-1].at >= stored[0].at
    head = ChainHead.objects.get(pk=1)
    assert (head.seq, head.hash) == (stored[-1].seq, stored[-1].hash)
    assert audit_log.verify().ok


@pytest.mark.django_db(transaction=True)
def test_both_databases_append_in_python_under_the_heads_lock():
    """The head locked (FOR UPDATE where the database has it), one INSERT, the head moved."""
    with CaptureQueriesContext(connection) as queries, transaction.atomic(), audit_log.batch():
        for n in range(3):
            audit_log.record("test.way", actor_type="system", actor_id="system", data={"n": n})
    statements = [q["sql"] for q in queries.captured_queries]
    assert not [s for s in statements if "impri_audit_append" in s]
    head = [s for s in statements if "audit_chainhead" in s]
    assert head[0].lstrip().upper().startswith("SELECT")
    if connection.features.has_select_for_update:
        assert head[0].rstrip().upper().endswith("FOR UPDATE")
    assert head[-1].lstrip().upper().startswith("UPDATE")
    inserts = [s for s in statements if s.lstrip().startswith('INSERT INTO "audit_auditevent"')]
    assert len(inserts) == 1  # the three events in one statement
    assert AuditEvent.objects.filter(event="test.way").count() == 3
    assert audit_log.verify().ok


@pytest.mark.django_db(transaction=True)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    events=st.lists(
        st.tuples(
            texts.filter(lambda t: len(t) <= 60 and not t.endswith(" ")),
            texts.filter(lambda t: not t.endswith(" ")),
            texts.filter(lambda t: len(t) <= 40 and not t.endswith(" ")),
            st.dictionaries(texts, json_values, max_size=4),
        ),
        min_size=1,
        max_size=4,
    )
)
def test_any_event_appended_in_the_database_hashes_as_python_verifies(events):
    """Random names and data, through the real append (PostgreSQL's function, or Python's)."""
    with transaction.atomic(), audit_log.batch():
        recorded = [
            audit_log.record(
                event or "e", actor_type="agent", actor_id=actor, action_id=action, data=data
            )
            for event, actor, action, data in events
        ]
    for entry in recorded:
        stored = AuditEvent.objects.get(seq=entry.seq)
        assert stored.hash == entry.hash
        assert stored.hash_matches()
        # jsonb may respell a number (1e21 comes back as an integer); its encoding is by value.
        assert canonical_json(stored.data) == canonical_json(entry.data)
    assert audit_log.verify().ok


OLD = importlib.import_module("audit.migrations.0004_append_function")


def _append_as_0004(entries: list[AuditEvent]) -> None:
    """What ``audit.chain`` ran on PostgreSQL before issue 41: one call of the function."""
    document = []
    for entry in entries:
        entry.seq, entry.at = 0, datetime(1970, 1, 1, tzinfo=UTC)
        head, tail = hash_parts(entry)
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
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT out_seq FROM impri_audit_append(%s::jsonb) ORDER BY out_seq",
            [json.dumps(document)],
        )
        assert len(cursor.fetchall()) == len(entries)


@pytest.mark.skipif(
    connection.vendor != "postgresql", reason="the function existed on PostgreSQL only"
)
@pytest.mark.django_db(transaction=True)
def test_a_chain_the_database_function_appended_still_verifies_and_goes_on_in_python():
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_proc WHERE proname = 'impri_audit_append'")
        assert cursor.fetchone()[0] == 0  # migration 0005 dropped it
    with connection.cursor() as cursor:
        cursor.execute(OLD.CREATE)  # the chain of a database migrated before 0005
    try:
        with transaction.atomic():
            _append_as_0004(
                [
                    AuditEvent(
                        scheme=CURRENT_SCHEME,
                        actor_type="agent",
                        actor_id="bot \u00e9",
                        actor_ref="agent:1",
                        action_id=f"act_{i}",
                        event="test.old",
                        data=data,
                    )
                    for i, data in enumerate(TRICKY)
                ]
            )
    finally:
        with connection.cursor() as cursor:
            cursor.execute(OLD.DROP)
    with transaction.atomic():
        audit_log.record("test.new", actor_type="system", actor_id="system", data={"n": 1})
    stored = list(AuditEvent.objects.order_by("seq"))
    assert [e.event for e in stored] == ["test.old"] * len(TRICKY) + ["test.new"]
    assert stored[-1].prev_hash == stored[-2].hash
    assert all(e.hash_matches() for e in stored)
    assert audit_log.verify().ok
