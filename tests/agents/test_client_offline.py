"""impri_client's offline parts: canonical JSON, timestamps, verify_grant, verify_webhook.

Grants are signed here with a locally generated Ed25519 key (the server-side
issuing is tested with the server); webhooks are checked against Impri's own
signing function and a real delivery.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import threading
import time
import uuid
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from impri_client import (
    ActionCancelled,
    ActionExpired,
    ActionRejected,
    AlreadySettled,
    ChangesRequested,
    InvalidGrant,
    WebhookVerificationError,
    canonical_json,
    payload_sha256,
    verify_grant,
    verify_webhook,
)
from impri_client.gate import outcome, result_detail
from impri_client.types import Decision, parse_time

from approvals import services
from delivery import webhooks
from tests.client_helpers import Signer, b64url
from tests.factories import make_action

ROOT = Path(__file__).resolve().parents[2]

# --- Canonical JSON (RFC 8785) ----------------------------------------------------


@pytest.mark.parametrize(
    ("number", "text"),
    [
        (0.0, "0"),
        (-0.0, "0"),
        (1.0, "1"),
        (-1.5, "-1.5"),
        (0.1, "0.1"),
        (4.50, "4.5"),
        (2e-3, "0.002"),
        (0.000001, "0.000001"),
        (1e-7, "1e-7"),
        (1e-27, "1e-27"),
        (5e-324, "5e-324"),
        (1e16, "10000000000000000"),
        (9007199254740992.0, "9007199254740992"),
        (295147905179352830000.0, "295147905179352830000"),
        (1e21, "1e+21"),
        (1e30, "1e+30"),
        (333333333.33333329, "333333333.3333333"),
        (1.7976931348623157e308, "1.7976931348623157e+308"),
        (-1.2345e-10, "-1.2345e-10"),
        (123456789012.5, "123456789012.5"),
    ],
)
def test_floats_take_ecmascripts_shortest_form(number, text):
    assert canonical_json(number) == text.encode()


def test_integers_are_exact_at_any_size_and_equal_integral_floats():
    assert canonical_json(2**63) == b"9223372036854775808"
    assert canonical_json(-(2**64) - 1) == b"-18446744073709551617"
    assert canonical_json(10**21 - 1) == b"999999999999999999999"
    assert canonical_json(True) == b"true"
    # ... and from 10^21 on like the nearest double: jsonb returns 1.5e300 as its digits.
    assert canonical_json(15 * 10**299) == canonical_json(1.5e300) == b"1.5e+300"
    assert canonical_json(-(10**21)) == b"-1e+21"
    # jsonb hands back 1e16 as an integer: the hash must not change.
    assert payload_sha256({"a": 1e16, "b": 2.0}) == payload_sha256({"a": 10**16, "b": 2})


def test_keys_sort_by_utf16_code_units_and_strings_escape_like_json_stringify():
    # RFC 8785 §3.2.3's example: U+1F600 (a surrogate pair) sorts before U+FB33.
    value = {"\u20ac": 1, "\r": 2, "\ufb33": 3, "1": 4, "\U0001f600": 5, "\u0080": 6, "\u00f6": 7}
    assert list(json.loads(canonical_json(value))) == [
        "\r",
        "1",
        "\u0080",
        "\u00f6",
        "\u20ac",
        "\U0001f600",
        "\ufb33",
    ]
    text = 'line\nquote" back\\ bell\x07 euro € del\x7f'
    assert canonical_json(text) == '"line\\nquote\\" back\\\\ bell\\u0007 euro € del\x7f"'.encode()


def test_the_rfc_8785_sample_object():
    sample = {
        "numbers": [333333333.33333329, 1e30, 4.50, 2e-3, 0.000000000000000000000000001],
        "string": "\u20ac$\u000f\u000aA'\u0042\u0022\u005c\\\"/",
        "literals": [None, True, False],
    }
    expected = (
        '{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],'
        '"string":"€$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}'
    )
    assert canonical_json(sample) == expected.encode()


def test_non_json_values_are_refused():
    for bad in (float("nan"), float("inf"), {1: "int key"}, object()):
        with pytest.raises((TypeError, ValueError)):
            canonical_json(bad)


# --- Timestamps ---------------------------------------------------------------------


def test_timestamps_parse_from_unix_seconds_and_iso_strings_as_aware_utc():
    expected = datetime(2025, 9, 14, 6, 10, tzinfo=UTC)
    assert parse_time(1757830200) == expected
    assert parse_time("2025-09-14T06:10:00Z") == expected
    assert parse_time("2025-09-14T08:10:00+02:00") == expected
    assert parse_time("2025-09-14T06:10:00") == expected
    assert parse_time(None) is None
    decision = Decision.from_json(
        {"action_id": "act_1", "status": "approved", "decision_at": 1757830200, "payload": {}}
    )
    assert decision.decision_at == expected and decision.grant is None


def test_outcomes_carry_the_note_and_the_reason_code():
    rejected = Decision.from_json(
        {
            "action_id": "act_1",
            "status": "rejected",
            "decision_at": 1757830200,
            "decided_by": {"type": "reviewer", "name": "rita"},
            "note": "not our fault",
            "reason": "policy",
        }
    )
    with pytest.raises(ActionRejected) as caught:
        outcome(rejected, 1.0)
    assert (caught.value.note, caught.value.reason) == ("not our fault", "policy")
    assert str(caught.value) == "action act_1 was rejected by rita (reason: policy): not our fault"
    asked = Decision.from_json(
        {"action_id": "act_2", "status": "changes_requested", "note": "only the mug"}
    )
    with pytest.raises(ChangesRequested) as caught:
        outcome(asked, 1.0)
    assert caught.value.note == "only the mug"
    for status, error in (("expired", ActionExpired), ("cancelled", ActionCancelled)):
        with pytest.raises(error):
            outcome(Decision.from_json({"action_id": "a", "status": status}), 1.0)
    with pytest.raises(AlreadySettled):
        outcome(Decision.from_json({"action_id": "a", "status": "executed"}), 1.0)


def test_what_a_function_returned_becomes_a_report_detail():
    assert result_detail(None) is None
    assert result_detail("re_1") == "re_1"
    assert result_detail({"txn": "re_1"}) == {"txn": "re_1"}
    assert result_detail(42) == {"result": 42}
    assert result_detail(object()).startswith("<object")


# --- Grants ---------------------------------------------------------------------------


PAYLOAD = {"order_id": "10432", "amount_cents": 5000, "currency": "USD"}


@pytest.fixture
def signer():
    return Signer("k1")


def claims_for(payload: dict, **overrides) -> dict:
    now = int(time.time())
    claims = {
        "act": "act_01",
        "payload_sha256": payload_sha256(payload),
        "iat": now,
        "exp": now + 300,
        "jti": uuid.uuid4().hex,
    }
    return {**claims, **overrides}


def test_a_valid_grant_verifies_and_answers_its_claims(signer):
    other = Signer("k0")
    jwks = {"keys": [other.jwk, signer.jwk]}
    claims = verify_grant(signer.grant(claims_for(PAYLOAD)), dict(PAYLOAD), jwks=jwks, action_id="act_01")  # fmt: skip
    assert claims.action_id == "act_01" and claims.kid == "k1"
    assert claims.payload_sha256 == payload_sha256(PAYLOAD)
    assert claims.expires_at > datetime.now(UTC)


def refusal(grant: str, payload: dict, jwks, **checks) -> str:
    with pytest.raises(InvalidGrant) as caught:
        verify_grant(grant, payload, jwks=jwks, **checks)
    return caught.value.code


def test_a_grant_for_another_payload_is_refused(signer):
    grant = signer.grant(claims_for(PAYLOAD))
    altered = {**PAYLOAD, "amount_cents": 8400}
    assert refusal(grant, altered, {"keys": [signer.jwk]}) == "payload_mismatch"
    assert refusal(grant, {**PAYLOAD, "extra": None}, {"keys": [signer.jwk]}) == "payload_mismatch"


def test_an_expired_grant_is_refused(signer):
    grant = signer.grant(claims_for(PAYLOAD, exp=int(time.time()) - 1))
    assert refusal(grant, PAYLOAD, [signer.jwk]) == "expired"
    # Clock skew is allowed only when asked for.
    assert verify_grant(grant, PAYLOAD, jwks=[signer.jwk], leeway_s=60).action_id == "act_01"


def test_a_grant_signed_by_another_key_is_refused(signer):
    impostor = Signer("k1")  # same kid, different key
    grant = impostor.grant(claims_for(PAYLOAD))
    assert refusal(grant, PAYLOAD, {"keys": [signer.jwk]}) == "bad_signature"
    unknown = Signer("k9").grant(claims_for(PAYLOAD))
    assert refusal(unknown, PAYLOAD, {"keys": [signer.jwk]}) == "unknown_key"


def test_a_tampered_grant_is_refused(signer):
    grant = signer.grant(claims_for({**PAYLOAD, "amount_cents": 100}))
    head, _, sig = grant.split(".")
    forged_claims = b64url(json.dumps(claims_for(PAYLOAD)).encode())
    assert refusal(f"{head}.{forged_claims}.{sig}", PAYLOAD, [signer.jwk]) == "bad_signature"
    flipped = sig[:-2] + ("A" if sig[-2] != "A" else "B") + sig[-1]
    assert refusal(f"{grant.rsplit('.', 1)[0]}.{flipped}", {**PAYLOAD, "amount_cents": 100}, [signer.jwk]) == "bad_signature"  # fmt: skip


def test_other_algorithms_and_garbage_are_refused(signer):
    claims = b64url(json.dumps(claims_for(PAYLOAD)).encode())
    none = b64url(json.dumps({"alg": "none", "kid": "k1"}).encode())
    assert refusal(f"{none}.{claims}.", PAYLOAD, [signer.jwk]) == "unsupported_alg"
    hs = signer.grant(claims_for(PAYLOAD), alg="HS256")
    assert refusal(hs, PAYLOAD, [signer.jwk]) == "unsupported_alg"
    for garbage in ("", "a.b", "not.a.jws", "e30.e30.e30.e30"):
        assert refusal(garbage, PAYLOAD, [signer.jwk]) == "malformed"


def test_rfc_9864s_ed25519_alg_verifies_like_eddsa(signer):
    grant = signer.grant(claims_for(PAYLOAD), alg="Ed25519")
    assert verify_grant(grant, PAYLOAD, jwks=[signer.jwk]).payload_sha256 == payload_sha256(PAYLOAD)
    assert refusal(grant, {**PAYLOAD, "amount_cents": 1}, [signer.jwk]) == "payload_mismatch"


def test_a_grant_for_another_action_is_refused_when_the_action_is_named(signer):
    grant = signer.grant(claims_for(PAYLOAD, act="act_other"))
    assert refusal(grant, PAYLOAD, [signer.jwk], action_id="act_01") == "wrong_action"


def test_a_grant_survives_jsonb_number_normalisation(signer):
    proposed = {"rate": 1e16, "ratio": 2.0, "cents": 5000}
    grant = signer.grant(claims_for(proposed))
    as_read_back = {"rate": 10**16, "ratio": 2, "cents": 5000}
    assert verify_grant(grant, as_read_back, jwks=[signer.jwk]).action_id == "act_01"


# --- Webhooks ------------------------------------------------------------------------

SECRET = "whsec_" + base64.b64encode(b"k" * 32).decode()


def signed_by_impri(body: dict, msg_id: str = "msg_1", at: int | None = None):
    at = int(time.time()) if at is None else at
    raw = webhooks.encode_body(body)
    headers = {
        "Webhook-Id": msg_id,
        "Webhook-Timestamp": str(at),
        "Webhook-Signature": webhooks.sign(SECRET, msg_id, at, raw),
    }
    return headers, raw


def test_verify_webhook_accepts_what_impris_signing_function_signs():
    body = {"action_id": "act_1", "status": "approved", "note": "Grüße ✓"}
    headers, raw = signed_by_impri(body)
    assert verify_webhook(headers, raw, SECRET) == body
    # Several signatures while a secret rotates: any v1 match will do.
    rotated = {**headers, "Webhook-Signature": "v1,bm90IGl0 " + headers["Webhook-Signature"]}
    assert verify_webhook(rotated, raw, SECRET) == body


def test_verify_webhook_refuses_tampering_replay_and_the_wrong_secret():
    headers, raw = signed_by_impri({"action_id": "act_1", "status": "approved"})
    with pytest.raises(WebhookVerificationError):
        verify_webhook(headers, raw.replace(b"approved", b"rejected"), SECRET)
    with pytest.raises(WebhookVerificationError):
        verify_webhook({**headers, "webhook-id": "msg_2"}, raw, SECRET)
    other = "whsec_" + base64.b64encode(b"x" * 32).decode()
    with pytest.raises(WebhookVerificationError):
        verify_webhook(headers, raw, other)
    old_headers, old_raw = signed_by_impri({"a": 1}, at=int(time.time()) - 3600)
    with pytest.raises(WebhookVerificationError, match="too far"):
        verify_webhook(old_headers, old_raw, SECRET)
    with pytest.raises(WebhookVerificationError, match="missing"):
        verify_webhook({}, raw, SECRET)


class Catcher:
    """A loopback HTTP server keeping the raw headers and body of each POST."""

    def __init__(self):
        self.requests: list[tuple[dict, bytes]] = []
        catcher = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                catcher.requests.append((dict(self.headers.items()), body))
                self.send_response(200)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        ).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.django_db(transaction=True)
def test_verify_webhook_accepts_a_real_delivery_of_a_decision(agent, rita, settings):
    settings.IMPRI_CALLBACK_ALLOWED_NETWORKS = ["127.0.0.1/32"]  # the catcher is on loopback
    catcher = Catcher()
    try:
        action = make_action(agent.agent, callback_url=catcher.url)
        services.decide(action.pk, by=rita.user, verdict="approve", edits={"payload.amount_cents": 5000})  # fmt: skip
        assert webhooks.deliver_due() == 1
    finally:
        catcher.close()
    [(headers, raw)] = catcher.requests
    body = verify_webhook(headers, raw, agent.agent.webhook_secret)
    assert body["action_id"] == action.pk and body["status"] == "approved"
    assert body["payload"]["amount_cents"] == 5000
    decision = Decision.from_json(body)
    assert decision.approved and decision.decision_at.tzinfo is not None
    with pytest.raises(WebhookVerificationError):
        verify_webhook(headers, raw, "whsec_" + base64.b64encode(b"z" * 32).decode())


# --- The base install -----------------------------------------------------------------


@pytest.mark.e2e
def test_the_base_install_works_without_cryptography(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", str(ROOT / "clients" / "python")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert install.returncode == 0, install.stderr
    probe = """
import importlib.util, json, impri_client
from impri_client import Impri, verify_webhook, payload_sha256, verify_grant
assert importlib.util.find_spec("cryptography") is None, "cryptography must not come with the base install"
Impri("http://127.0.0.1:9", "imp_a_x").close()
try:
    verify_grant("a.b.c", {}, jwks={"keys": [{"kty": "OKP", "crv": "Ed25519", "x": "AA"}]})
except ImportError as exc:
    print(json.dumps({"hash": payload_sha256({"b": 1.0, "a": [1e16]}), "error": str(exc)}))
"""
    ran = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr
    out = json.loads(ran.stdout)
    assert out["hash"] == payload_sha256({"a": [10**16], "b": 1})
    assert "impri-client[grants]" in out["error"]
    script = subprocess.run([str(venv / "bin" / "impri-agent"), "--help"], capture_output=True, text=True)  # fmt: skip
    assert script.returncode == 0 and "push" in script.stdout
