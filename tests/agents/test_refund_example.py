"""examples/refund_agent: the stand-in processor's checks, and the whole loop against Impri.

The processor's refusals are tested with grants signed by a local Ed25519 key;
the end-to-end run uses the grants a real `impri serve` issues.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid

import httpx
import pytest
from impri_client import Impri, payload_sha256

from examples.refund_agent.agent import decide_refund, load_tickets
from examples.refund_agent.processor import Processor, impri_jwks
from tests.client_helpers import Signer, start_live
from tests.live import ROOT

PAYLOAD = {"order_id": "10434", "amount_cents": 12000, "currency": "USD", "ticket_id": "T-1003"}


def claims_for(payload: dict, action_id: str = "act_1", **overrides) -> dict:
    now = int(time.time())
    claims = {
        "act": action_id,
        "payload_sha256": payload_sha256(payload),
        "iat": now,
        "exp": now + 600,
        "jti": uuid.uuid4().hex,
    }
    return {**claims, **overrides}


@pytest.fixture
def signer():
    return Signer("k1")


@pytest.fixture
def processor(signer):
    fetched = []

    def jwks(refresh: bool) -> dict:
        fetched.append(refresh)
        return {"keys": [signer.jwk]}

    processor = Processor(jwks)
    processor.url = processor.serve()
    processor.fetched = fetched
    yield processor
    processor.close()


def ask(url: str, payload: dict, grant: str | None, action_id: str = "act_1") -> httpx.Response:
    body = {"action_id": action_id, "payload": payload, "grant": grant}
    return httpx.post(url + "/v1/refunds", json=body, timeout=10)


def test_the_processor_pays_exactly_an_approved_payload_once(processor, signer):
    grant = signer.grant(claims_for(PAYLOAD))
    paid = ask(processor.url, PAYLOAD, grant)
    assert paid.status_code == 201, paid.text
    assert paid.json()["amount_cents"] == 12000
    assert [r["amount_cents"] for r in processor.refunds] == [12000]

    replay = ask(processor.url, PAYLOAD, grant)
    assert (replay.status_code, replay.json()["error"]) == (403, "reused")
    assert len(processor.refunds) == 1


@pytest.mark.parametrize(
    ("case", "code"),
    [
        ("unapproved", "no_grant"),
        ("altered", "payload_mismatch"),
        ("expired", "expired"),
        ("other key", "bad_signature"),
        ("other action", "wrong_action"),
        ("garbage", "malformed"),
    ],
)
def test_the_processor_refuses_what_was_not_approved(processor, signer, case, code):
    grant = signer.grant(claims_for(PAYLOAD))
    payload = PAYLOAD
    if case == "unapproved":
        grant = None
    elif case == "altered":
        payload = {**PAYLOAD, "amount_cents": 50000}
    elif case == "expired":
        grant = signer.grant(claims_for(PAYLOAD, exp=int(time.time()) - 5))
    elif case == "other key":
        grant = Signer("k1").grant(claims_for(PAYLOAD))
    elif case == "other action":
        grant = signer.grant(claims_for(PAYLOAD, action_id="act_2"))
    elif case == "garbage":
        grant = "not-a-grant"
    refused = ask(processor.url, payload, grant)
    assert refused.status_code == 403
    assert refused.json()["error"] == code
    assert processor.refunds == []
    assert [r["code"] for r in processor.refusals] == [code]


def test_the_processor_fetches_keys_again_for_a_new_key_id(processor, signer):
    rotated = Signer("k2")
    grant = rotated.grant(claims_for(PAYLOAD))
    assert ask(processor.url, PAYLOAD, grant).json()["error"] == "unknown_key"
    assert processor.fetched == [False, True]  # it asked Impri again before refusing


def test_the_bot_believes_a_forceful_customer():
    tickets = {t["id"]: t for t in load_tickets()}
    assert decide_refund(tickets["T-1001"])["amount_cents"] == 8400
    assert decide_refund(tickets["T-1002"])["amount_cents"] == 1200  # 10 % goodwill
    assert decide_refund(tickets["T-1003"])["amount_cents"] == 50000  # more than the order
    assert decide_refund(tickets["T-1004"]) is None


# --- The whole loop against a real server -----------------------------------------------


@pytest.fixture(scope="module")
def live():
    live = start_live()
    yield live
    live.deployment.close()


@pytest.mark.e2e
def test_the_refund_agent_end_to_end(live):
    rita = live.reviewer()
    impri = Impri(live.url, live.agent_key)
    processor = Processor(impri_jwks(impri))
    processor_url = processor.serve()
    env = {**os.environ, "IMPRI_URL": live.url, "IMPRI_API_KEY": live.agent_key}
    bot = subprocess.Popen(
        [sys.executable, "-m", "examples.refund_agent", "--processor-url", processor_url],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # The reviewer works the queue: approves the mug, declines cash for a late
        # parcel, and lowers the forceful customer's $500 to the order's $120.
        mug = rita.pending_titled("Refund $84.00 on order 10432")
        late = rita.pending_titled("Refund $12.00 on order 10433")
        lamp = rita.pending_titled("Refund $500.00 on order 10434")
        assert lamp["flags"] == ["policy_exception"]
        rita.approve(mug["action_id"])
        rita.reject(late["action_id"], note="late parcels get a coupon, not cash")
        rita.approve(lamp["action_id"], edits={"payload.amount_cents": 12000}, note="order total")
        out, err = bot.communicate(timeout=120)
    finally:
        if bot.poll() is None:
            bot.kill()
        processor.close()
    assert bot.returncode == 0, err
    outcomes = {o["ticket"]: o for o in json.loads(out)["outcomes"]}
    assert outcomes["T-1001"]["outcome"] == "refunded"
    assert outcomes["T-1002"]["outcome"] == "rejected"
    assert outcomes["T-1002"]["note"] == "late parcels get a coupon, not cash"
    assert outcomes["T-1003"]["outcome"] == "refunded"
    assert outcomes["T-1003"]["refund"]["amount_cents"] == 12000
    assert outcomes["T-1004"]["outcome"] == "no refund needed"
    assert sorted(r["amount_cents"] for r in processor.refunds) == [8400, 12000]
    assert processor.refusals == []

    stored = impri.get(lamp["action_id"])
    assert stored.status == "executed"
    assert stored.result.detail["refund_id"] == outcomes["T-1003"]["refund"]["refund_id"]
    assert stored.original_payload["amount_cents"] == 50000

    # Every way around the gate, with the real grant Impri issued for the lamp.
    grant = processor.honoured_grants[lamp["action_id"]]
    lowered = stored.payload
    assert impri.verify_grant(grant, lowered, action_id=lamp["action_id"]).action_id == lamp["action_id"]  # fmt: skip
    processor_url = processor.serve()
    try:
        replay = ask(processor_url, lowered, grant, lamp["action_id"])
        assert replay.json()["error"] == "reused"
        altered = ask(processor_url, {**lowered, "amount_cents": 50000}, grant, lamp["action_id"])
        assert altered.json()["error"] == "payload_mismatch"
        unapproved = impri.push(kind="payment.refund", title="never approved", preview="-", payload=lowered)  # fmt: skip
        assert ask(processor_url, lowered, None, unapproved.action_id).json()["error"] == "no_grant"
        stolen = ask(processor_url, lowered, grant, unapproved.action_id)
        assert stolen.json()["error"] == "wrong_action"
    finally:
        processor.close()
        impri.close()
    assert len(processor.refunds) == 2
    later = Processor(impri_jwks(Impri(live.url, live.agent_key)), clock=lambda: time.time() + 400 * 86400)  # fmt: skip
    with pytest.raises(Exception, match="expired"):
        later.refund(lamp["action_id"], lowered, grant)
