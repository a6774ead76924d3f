"""The client's payload_sha256 is the server's, for every number shape a payload can carry.

A grant binds the approved payload by its hash; an executor that computes
another hash than Impri's refuses every grant. Each payload is pushed to a
real server, approved by a reviewer, and the server's hash (the decision's
``payload_sha256``, or the ``action.approved`` audit event's on servers that
don't return it) compared with ``impri_client.payload_sha256``.
"""

from __future__ import annotations

import pytest
from impri_client import Impri, payload_sha256

from tests.client_helpers import start_live

pytestmark = pytest.mark.e2e

PAYLOADS = {
    "small ints": {"a": 1, "b": -42, "c": 0, "amount_cents": 8400},
    # A payload is I-JSON (RFC 7493): integers within ±(2^53 - 1); larger ones are refused.
    "largest safe": {"n": 2**53 - 1, "m": -(2**53 - 1)},
    "0.1": {"x": 0.1, "y": 0.30000000000000004},
    "1e15": {"x": 1e15},
    "-0.0": {"x": -0.0},
    "integral float": {"x": 1.0, "y": 250.0},
    "tiny and large": {"x": 1e-7, "y": 4.5e15, "z": 123.456, "w": 9007199254740991.0},
    "nested": {
        "lines": [
            {"qty": 2, "price": 9.99},
            {"qty": 1.0, "tags": ["a", {"z": None, "y": True, "x": False}]},
        ],
        "meta": {"depth": {"deeper": {"deepest": [[], {}, [1, [2, [3.5]]]]}}},
    },
    "unicode": {
        "name": "Grüße ✓",
        "emoji": "😀",
        "escapes": 'line\nbreak\t"quoted" back\\slash \x01',
        "é": 1,
        "e": 2,
    },
    "astral key order": {"\ufb33": 1, "\U0001f600": 2, "\u20ac": 3},
}


@pytest.fixture(scope="module")
def live():
    live = start_live()
    yield live
    live.deployment.close()


@pytest.fixture(scope="module")
def server_hashes(live):
    """Push and approve every payload once; (pushed, read back, server hash) by name."""
    rita = live.reviewer()
    found = {}
    with Impri(live.url, live.agent_key) as impri:
        for name, payload in PAYLOADS.items():
            action = impri.push(
                kind="test.hash", title=f"hash {name}", preview="-", payload=payload
            )
            rita.approve(action.action_id)
            decision = impri.await_decision(action.action_id, timeout_s=10)
            assert decision.approved, decision
            [approved] = [e for e in rita.audit(action.action_id) if e["event"] == "action.approved"]  # fmt: skip
            # The decision's hash is the one the audit chain recorded for the approval.
            assert approved["data"]["payload_sha256"] == decision.payload_sha256
            found[name] = (payload, decision.payload, decision.payload_sha256)
    return found


@pytest.mark.parametrize("name", list(PAYLOADS))
def test_client_and_server_hash_a_payload_alike(server_hashes, name):
    pushed, read_back, server_hash = server_hashes[name]
    client_hash = payload_sha256(pushed)
    # The stored payload may come back in another number form (jsonb): same hash.
    assert payload_sha256(read_back) == client_hash
    assert server_hash == client_hash


@pytest.mark.parametrize("number", [2**53, 2**63, -(2**63), 1e16, 999999999999999999999])
def test_a_payload_number_beyond_i_json_is_refused_naming_its_path(live, number):
    from impri_client.errors import ValidationError

    with Impri(live.url, live.agent_key) as impri, pytest.raises(ValidationError) as refused:
        impri.push(kind="test.hash", title="too big", preview="-", payload={"n": {"k": number}})
    assert refused.value.field == "payload.n.k"
