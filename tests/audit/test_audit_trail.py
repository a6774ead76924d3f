"""The trail survives the database: every number shape, append-only guards, a cut tail.

Runs on SQLite and again on PostgreSQL (whose ``jsonb`` rewrites numbers:
``1e16`` reads back as ``10000000000000000``, ``-0.0`` as ``0.0``).
"""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import Group
from django.db import DatabaseError, connection, transaction

from approvals import services
from approvals.models import Action, Review
from audit import log as audit_log
from audit.canonical import canonical_json, canonical_json_v1, number_text
from audit.models import AuditEvent, ChainHead, VerificationRun
from tests.conftest import SCALED, _audit_guards_lifted
from tests.factories import make_action, refund_body

# The JSON spellings the issue names, as an agent's JSON text carries them.
SHAPES = {
    "e20": "1e20",
    "neg_zero": "-0.0",
    "e16": "1e16",
    "e16_plus": "1e+16",
    "e16_digits": "10000000000000000",
    "tenth": "0.1",
    "two_63": "9223372036854775808",
    "tiny": "1e-7",
    "one_point_oh": "1.0",
}


# A payload's numbers are I-JSON (RFC 7493: integers within ±(2^53 − 1)); these are its
# odd spellings. Context and results keep every shape above.
PAYLOAD_SHAPES = {
    "neg_zero": "-0.0",
    "e15": "1e15",
    "e15_plus": "1e+15",
    "e15_digits": "1000000000000000",
    "max_safe": "9007199254740991",
    "tenth": "0.1",
    "tiny": "1e-7",
    "one_point_oh": "1.0",
}


def _numbers_json(shapes: dict = SHAPES) -> str:
    return "{" + ",".join(f'"{k}":{v}' for k, v in shapes.items()) + "}"


@pytest.mark.parametrize(
    ("spellings", "expected"),
    [
        (["1e16", "1e+16", "10000000000000000", "1E16", "1.0e16", "10000000000000000.0"], None),
        (["-0.0", "0.0", "0", "-0", "0e10"], "0"),
        (["0.1", "1e-1", "0.10"], "0.1"),
        (["9223372036854775808"], "9223372036854775808"),
        (["1e20", "100000000000000000000"], "100000000000000000000"),
        (["1e-7", "0.0000001", "1E-07"], "1e-7"),
        (["9.223372036854776e18", "9223372036854776000"], "9223372036854776000"),
    ],
)
def test_every_spelling_of_one_number_encodes_to_one_string(spellings, expected):
    texts = {number_text(json.loads(spelling)) for spelling in spellings}
    assert len(texts) == 1, texts
    if expected is not None:
        assert texts == {expected}
    assert number_text(1e16) == "10000000000000000"


def test_non_numbers_keep_their_types_and_non_finite_numbers_are_refused():
    assert canonical_json({"b": True, "a": [None, "x\u00e9", 1, 1.5]}) == (
        '{"a":[null,"xé",1,1.5],"b":true}'.encode()
    )
    with pytest.raises(ValueError):
        canonical_json({"x": float("inf")})


def test_scheme_2_agrees_with_scheme_1_on_plain_data():
    # Most events (integers, strings) encode the same in both: the cut-over changes little.
    value = {"amount_cents": 8400, "note": "ok", "nested": [1, {"z": "ü", "a": 0.25}]}
    assert canonical_json(value) == canonical_json_v1(value)


def _raw_push(agent, **overrides) -> dict:
    body = refund_body(
        editable=["payload.amount_cents", "payload.numbers.tenth", "payload.numbers.max_safe"],
        **overrides,
    )
    body["payload"]["numbers"] = "@@PAYLOAD_NUMBERS@@"
    body["context"]["numbers"] = "@@NUMBERS@@"
    text = json.dumps(body).replace('"@@NUMBERS@@"', _numbers_json())
    text = text.replace('"@@PAYLOAD_NUMBERS@@"', _numbers_json(PAYLOAD_SHAPES))
    response = agent.client().post("/actions", text)
    assert response.status_code == 201, response.content
    return response.json()


def test_every_number_shape_leaves_a_verifying_chain_and_equal_payload_hashes(agent, rita):
    # An unedited payload: pushed, approved, executed with a detail full of odd numbers.
    plain = _raw_push(agent)
    response = rita.client().post(f"/actions/{plain['action_id']}/approve", {})
    assert response.status_code == 200, response.content
    detail = '{"status": "executed", "detail": ' + _numbers_json() + "}"
    response = agent.client().post(f"/actions/{plain['action_id']}/result", detail)
    assert response.status_code == 200, response.content

    # An edited one: the edits themselves carry the shapes.
    edited = _raw_push(agent)
    edits = (
        '{"edits": {"payload.numbers.tenth": 1e15, "payload.numbers.max_safe": -9007199254740991}}'
    )
    response = rita.client().post(f"/actions/{edited['action_id']}/approve", edits)
    assert response.status_code == 200, response.content
    response = rita.client().post(
        f"/actions/{_raw_push(agent)['action_id']}/approve",
        '{"edits": {"payload.numbers.tenth": -0.0}}',
    )
    assert response.status_code == 200, response.content

    result = audit_log.verify()
    assert result.ok, result
    assert result.checked == AuditEvent.objects.count()
    assert rita.client().get("/audit/verify").json() == {
        "ok": True,
        "checked": result.checked,
        "first_broken_seq": None,
        "problem": "",
    }

    trail = {e.event: e for e in AuditEvent.objects.for_action(plain["action_id"])}
    stored = Action.objects.get(pk=plain["action_id"])
    digest = services.payload_sha256(stored.payload)
    assert trail["action.pushed"].data["payload_sha256"] == digest
    assert trail["action.approved"].data["payload_sha256"] == digest
    assert trail["result.reported"].data["approved_payload_sha256"] == digest
    assert Review.objects.get(action=stored).payload_sha256 == digest
    assert {e.scheme for e in AuditEvent.objects.all()} == {2}
    changes = AuditEvent.objects.get(action_id=edited["action_id"], event="action.edited")
    assert changes.data["changes"]["payload.numbers.tenth"]["after"] == 1e15


def test_a_two_approver_action_with_odd_numbers_counts_both_approvals(agent, rita, sam, db):
    from rules import services as rule_services

    rule_services.replace_rules(
        rule_services.parse_yaml(
            "rules: [{name: two, kind: payment.refund, then: review, approvals_required: 2}]"
        ),
        by="cli",
    )
    pushed = _raw_push(agent)
    assert rita.client().post(f"/actions/{pushed['action_id']}/approve", {}).status_code == 200
    body = sam.client().post(f"/actions/{pushed['action_id']}/approve", {}).json()
    assert body["status"] == "approved"
    assert audit_log.verify().ok


# --- Append-only, on both databases -------------------------------------------------


def _refused(statement: str) -> None:
    with (
        pytest.raises(DatabaseError, match="append-only"),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute(statement)


def test_the_database_refuses_update_delete_and_truncate_of_events(agent):
    make_action(agent.agent)
    before = AuditEvent.objects.count()
    _refused("UPDATE audit_auditevent SET actor_id = 'mallory'")
    _refused("DELETE FROM audit_auditevent")
    _refused("DELETE FROM audit_auditevent WHERE seq = (SELECT MAX(seq) FROM audit_auditevent)")
    if connection.vendor == "postgresql":
        _refused("TRUNCATE audit_auditevent")
        _refused("TRUNCATE audit_chainhead")
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        AuditEvent.objects.filter(event="action.pushed").update(actor_id="mallory")
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        AuditEvent.objects.all().delete()
    assert AuditEvent.objects.count() == before
    assert not AuditEvent.objects.filter(actor_id="mallory").exists()


def test_the_chain_head_never_moves_back_nor_disappears(agent):
    make_action(agent.agent)
    _refused("UPDATE audit_chainhead SET seq = seq - 1")
    _refused("DELETE FROM audit_chainhead")
    assert ChainHead.objects.get(pk=1).seq == AuditEvent.objects.count()


@pytest.mark.django_db(transaction=True)
def test_the_suite_alone_flushes_past_the_triggers_and_they_hold_after(agent):
    # A transactional test: its tables are flushed after it, through the
    # suite's own bypass; the next assertion proves the guards are back.
    make_action(agent.agent)
    _refused("DELETE FROM audit_auditevent")


@pytest.mark.django_db(transaction=True)
def test_the_guards_are_back_after_a_flush(agent):
    make_action(agent.agent)
    _refused("DELETE FROM audit_auditevent")
    assert audit_log.verify().ok


# --- Tail cutting -------------------------------------------------------------------------


def _cut_tail(keep: int) -> None:
    """What someone who dropped the triggers would do."""
    with _audit_guards_lifted(connection), connection.cursor() as cursor:
        cursor.execute("DELETE FROM audit_auditevent WHERE seq > %s", [keep])


def test_a_cut_tail_is_detected_against_the_chain_head(agent, rita):
    for _ in range(3):
        make_action(agent.agent)
    head = AuditEvent.objects.count()
    assert audit_log.verify().ok
    _cut_tail(head - 2)
    result = audit_log.verify()
    assert not result.ok
    assert result.first_broken_seq == head - 1
    assert "tail was cut" in result.problem
    body = rita.client().get("/audit/verify").json()
    assert body["ok"] is False and body["first_broken_seq"] == head - 1


def test_routine_verification_checks_only_new_events_and_still_sees_a_cut(agent, rita):
    make_action(agent.agent)
    first = rita.client().get("/audit/verify").json()
    assert first["ok"] and first["checked"] == AuditEvent.objects.count()
    make_action(agent.agent)  # two more events
    second = rita.client().get("/audit/verify").json()
    assert second == {"ok": True, "checked": 2, "first_broken_seq": None, "problem": ""}
    assert rita.client().get("/audit/verify").json()["checked"] == 0
    _cut_tail(AuditEvent.objects.count() - 1)
    cut = rita.client().get("/audit/verify").json()
    assert cut["ok"] is False and cut["first_broken_seq"] == AuditEvent.objects.count() + 1


def test_a_tampered_event_before_the_last_checkpoint_is_caught_by_the_full_run(agent, rita):
    auditor = rita.user
    auditor.groups.add(Group.objects.get_or_create(name="auditors")[0])
    for _ in range(3):
        make_action(agent.agent)
    assert rita.client().get("/audit/verify").json()["ok"]
    with _audit_guards_lifted(connection), connection.cursor() as cursor:
        cursor.execute("UPDATE audit_auditevent SET actor_id = 'mallory' WHERE seq = 2")
    # The routine check covers only what came after its checkpoint (documented)...
    assert rita.client().get("/audit/verify").json()["ok"] is True
    # ...the full run, in the background, re-checks everything.
    response = rita.client().post("/audit/verify/full")
    assert response.status_code == 202, response.content
    run = response.json()
    assert run["status"] == "queued"
    assert audit_log.run_full_verifications() == 1
    done = rita.client().get(f"/audit/verify/full/{run['id']}").json()
    assert done["status"] == "done" and done["ok"] is False
    assert done["first_broken_seq"] == 2


def test_a_forged_verification_record_is_not_trusted(agent, rita):
    make_action(agent.agent)
    assert rita.client().get("/audit/verify").json()["ok"]
    VerificationRun.objects.update(to_seq=1, to_hash="f" * 64)
    assert audit_log.last_verified().seq == 0  # the HMAC no longer holds: back to the genesis


def test_the_verify_endpoint_takes_a_checkpoint(agent, rita):
    make_action(agent.agent)
    checkpoint = audit_log.make_checkpoint()
    make_action(agent.agent)
    body = rita.client().post("/audit/verify", {"checkpoint": checkpoint}).json()
    assert body == {"ok": True, "checked": 2, "first_broken_seq": None, "problem": ""}
    forged = {**checkpoint, "hash": "0" * 64}
    body = rita.client().post("/audit/verify", {"checkpoint": forged}).json()
    assert body["ok"] is False and "signature" in body["problem"]
    _cut_tail(checkpoint["seq"] - 1)
    body = rita.client().post("/audit/verify", {"checkpoint": checkpoint}).json()
    assert body["ok"] is False and body["first_broken_seq"] == checkpoint["seq"]
    response = rita.client().post("/audit/verify", {"checkpoint": {"seq": "x"}})
    assert response.status_code == 422 and "checkpoint" in response.content.decode()
    # JSON's true is not 1 and "5" is not 5 (schemathesis found `true` accepted as 1).
    for seq in (True, str(checkpoint["seq"])):
        response = rita.client().post("/audit/verify", {"checkpoint": {**checkpoint, "seq": seq}})
        assert response.status_code == 422, response.content
        assert response.json()["field"] == "checkpoint.seq"


def test_checkpoint_details_and_full_runs_need_an_auditor(agent, rita):
    make_action(agent.agent)
    assert rita.client().get("/audit/checkpoint").status_code == 403
    assert rita.client().post("/audit/verify/full").status_code == 403
    assert agent.client().get("/audit/checkpoint").status_code == 403
    rita.user.groups.add(Group.objects.get_or_create(name="auditors")[0])
    body = rita.client().get("/audit/checkpoint").json()
    assert body["checkpoint"]["seq"] == body["head_seq"] == AuditEvent.objects.count()
    assert audit_log.checkpoint_signature_ok(body["checkpoint"])


@pytest.mark.skipif(not SCALED, reason="jsonb's number rewriting happens on PostgreSQL only")
def test_postgresql_really_rewrites_the_numbers_we_hash(agent):
    # A payload is I-JSON (no 1e16 there any more); context still carries any number.
    action = make_action(
        agent.agent,
        payload={"amount_cents": 8400, "currency": "USD", "z": -0.0},
        context={"big": 1e16},
    )
    stored = Action.objects.get(pk=action.pk)
    assert stored.context["big"] == 10000000000000000 and isinstance(stored.context["big"], int)
    assert canonical_json_v1(stored.context) != canonical_json_v1(action.context)  # scheme 2's why
    assert canonical_json(stored.context) == canonical_json(action.context)
    assert canonical_json(stored.payload) == canonical_json(action.payload)


def test_a_chain_written_before_the_cut_over_still_verifies(agent, rita):
    import copy

    for _ in range(3):
        make_action(agent.agent, payload={"amount_cents": 8400, "currency": "USD", "rate": 1.0})
    chain = copy.deepcopy(list(AuditEvent.objects.order_by("seq")))
    cut_over = 4
    prev = audit_log.GENESIS_HASH
    for event in chain:  # events before the cut-over as the old code wrote them
        if event.seq < cut_over:
            event.scheme, event.actor_ref = 1, ""
        event.prev_hash = prev
        event.hash = prev = event.compute_hash()
    assert audit_log.verify_events(chain).ok
    assert chain[0].hash != AuditEvent.objects.get(seq=1).hash  # a different encoding indeed
    chain[cut_over].scheme = 1  # back to scheme 1 after the cut-over: refused
    result = audit_log.verify_events(chain)
    assert not result.ok and result.first_broken_seq == cut_over + 1
    assert "scheme goes back" in result.problem


@pytest.mark.e2e  # runs the auditors' script as a subprocess
def test_the_auditors_script_in_the_docs_verifies_an_export(agent, rita, tmp_path):
    import re
    import subprocess
    import sys
    from io import StringIO
    from pathlib import Path

    from django.core.management import call_command

    plain = _raw_push(agent)
    rita.client().post(f"/actions/{plain['action_id']}/approve", {})
    docs = Path(__file__).resolve().parents[2] / "docs" / "audit.md"
    script = re.search(r"re-check an export.*?```python\n(.*?)```", docs.read_text(), re.S)
    (tmp_path / "check.py").write_text(script.group(1))
    out = StringIO()
    call_command("audit", "export", stdout=out)
    (tmp_path / "log.jsonl").write_text(out.getvalue())
    done = subprocess.run(
        [sys.executable, str(tmp_path / "check.py"), str(tmp_path / "log.jsonl")],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"ok {AuditEvent.objects.count()}"
    tampered = out.getvalue().replace('"kind": "payment.refund"', '"kind": "payment.charge"', 1)
    assert tampered != out.getvalue()
    (tmp_path / "log.jsonl").write_text(tampered)
    done = subprocess.run(
        [sys.executable, str(tmp_path / "check.py"), str(tmp_path / "log.jsonl")],
        capture_output=True,
        text=True,
    )
    assert done.returncode != 0 and "broken at" in done.stderr


@pytest.mark.parametrize("spelling", ["1e400", "NaN", "-Infinity"])
def test_numbers_json_cannot_hold_are_refused_naming_the_field(agent, rita, spelling):
    body = json.dumps(refund_body()).replace('"reason": "damaged"', f'"reason": {spelling}')
    response = agent.client().post("/actions", body)
    assert response.status_code == 422, response.content
    assert "payload.reason" in response.content.decode()
    body = json.dumps(refund_body()).replace('"order_total_cents": 8400', f'"x": {spelling}')
    response = agent.client().post("/actions", body)
    assert response.status_code == 422 and "context.x" in response.content.decode()
    pushed = agent.client().post("/actions", refund_body()).json()["action_id"]
    edit = '{"edits": {"payload.amount_cents": ' + spelling + "}}"
    response = rita.client().post(f"/actions/{pushed}/approve", edit)
    assert response.status_code == 422 and "payload.amount_cents" in response.content.decode()
    assert rita.client().post(f"/actions/{pushed}/approve", {}).status_code == 200
    detail = '{"status": "executed", "detail": {"fee": ' + spelling + "}}"
    response = agent.client().post(f"/actions/{pushed}/result", detail)
    assert response.status_code == 422 and "detail.fee" in response.content.decode()
    assert audit_log.verify().ok


def test_a_queued_full_run_is_done_by_the_embedded_ticker_and_the_celery_task(agent, rita):
    from audit.tasks import run_full_verifications
    from impri.ticker import jobs_on, run_jobs

    make_action(agent.agent)
    first = audit_log.request_full_verification(by="rita")
    done = run_jobs([j for j in jobs_on("state") if j.name == "audit-full-verifications"])
    assert done["audit-full-verifications"] == 1
    first.refresh_from_db()
    assert (first.status, first.ok, first.checked) == ("done", True, AuditEvent.objects.count())
    second = audit_log.request_full_verification(by="rita")
    assert run_full_verifications.apply().get() == 1
    second.refresh_from_db()
    assert second.ok is True and second.to_seq == AuditEvent.objects.count()
    assert audit_log.run_full_verifications() == 0  # each run is done once


def _write_as_before_the_upgrade(datas: list[dict]) -> None:
    """Append scheme-1 events the way the old code did: hashed over the value in memory."""
    from django.utils import timezone

    with transaction.atomic():
        head = ChainHead.objects.get_or_create(pk=1)[0]
        seq, prev = head.seq, head.hash
        events = []
        for data in datas:
            seq += 1
            event = AuditEvent(
                seq=seq,
                scheme=1,
                at=timezone.now(),
                actor_type="agent",
                actor_id="support-bot",
                event="result.reported",
                data=data,
                prev_hash=prev,
            )
            event.hash = prev = event.compute_hash()
            events.append(event)
        AuditEvent.objects.bulk_create(events)
        ChainHead.objects.filter(pk=1).update(seq=seq, hash=prev)


def test_a_chain_written_before_the_upgrade_verifies_in_the_database_and_goes_on(db):
    from tests.conftest import make_agent

    _write_as_before_the_upgrade(
        [
            {"detail": {"x": 1e20, "y": -0.0, "z": 1e16}},  # what jsonb rewrote
            {"detail": {"n": 8400, "rate": 0.1, "ok": True}},
            {"detail": {"big": [2.0**63, 0.0, 12345678901234567890]}},
        ]
    )
    make_action(make_agent("support-bot").agent)  # scheme 2 from here on
    result = audit_log.verify()
    assert result.ok, result
    schemes = list(AuditEvent.objects.values_list("scheme", flat=True))
    assert schemes[:4] == [1, 1, 1, 2] and set(schemes[3:]) == {2}
    if connection.vendor == "postgresql":
        # jsonb rewrote 1e20, -0.0 and 1e16: only their old spelling matches the old hash.
        rewritten = AuditEvent.objects.get(seq=1)
        assert rewritten.compute_hash() != rewritten.hash and rewritten.hash_matches()
    with _audit_guards_lifted(connection), connection.cursor() as cursor:
        cursor.execute(
            "UPDATE audit_auditevent SET actor_id = 'mallory' WHERE seq = 2"
        )  # an old event tampered with
    result = audit_log.verify()
    assert not result.ok and result.first_broken_seq == 2


def test_a_callers_checkpoint_never_becomes_the_routine_starting_point(agent, rita):
    make_action(agent.agent)
    checkpoint = audit_log.make_checkpoint()  # signed, but nothing before it was checked
    with _audit_guards_lifted(connection), connection.cursor() as cursor:
        cursor.execute("UPDATE audit_auditevent SET actor_id = 'mallory' WHERE seq = 1")
    assert rita.client().post("/audit/verify", {"checkpoint": checkpoint}).json()["ok"]
    routine = rita.client().get("/audit/verify").json()
    assert routine["ok"] is False and routine["first_broken_seq"] == 1


def test_the_verify_command_leaves_a_full_run_that_routine_checks_start_after(agent, rita):
    from io import StringIO

    from django.core.management import call_command

    make_action(agent.agent)
    out = StringIO()
    call_command("audit", "verify", stdout=out)
    assert out.getvalue().startswith("ok: ")
    run = VerificationRun.objects.get(kind="full")
    assert run.ok and run.to_seq == AuditEvent.objects.count() and run.requested_by == "cli"
    assert rita.client().get("/audit/verify").json()["checked"] == 0
