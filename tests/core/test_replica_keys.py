"""Replicas that sign grants: two `impri serve` on one PostgreSQL, each with its own data dir.

Without a shared IMPRI_GRANT_SIGNING_KEY_FILE each replica generates its own key. Each
publishes its public key to the database at start, so a grant approved through one replica
verifies against the JWKS of the other; the misconfiguration is still reported (the system
check at start, /readyz, /metrics, `impri check`). With the key given to both: one key, quiet.
"""

from __future__ import annotations

import tempfile

import httpx
import pytest
from impri_client.grants import verify_grant

from approvals.grant_pem import new_pem
from tests.conftest import SCALED
from tests.factories import refund_body
from tests.live import Deployment

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not SCALED, reason="replicas share PostgreSQL (the DATABASE_URL leg)"),
]


def replicas(**env: str):
    deployment = Deployment(**env)
    servers = [
        deployment.start_server(IMPRI_DATA_DIR=tempfile.mkdtemp(prefix="impri-replica-"))
        for _ in range(2)
    ]
    return deployment, servers


def approved_grant(deployment, through) -> tuple[dict, str, str]:
    agent = deployment.last_word("createagent", "support-bot")
    deployment.impri("createreviewer", "rita")
    rita = deployment.last_word("token", "rita")
    body = refund_body()
    with through.client(agent) as client:
        action = client.post("/actions", json=body).json()
    with through.client(rita) as client:
        decided = client.post(f"/actions/{action['action_id']}/approve", json={})
        assert decided.status_code == 200, decided.text
    with through.client(agent) as client:
        decision = client.get(f"/actions/{action['action_id']}/decision?timeout_s=0").json()
    assert decision["status"] == "approved"
    return decision, action["action_id"], agent


def jwks(server) -> dict:
    return httpx.get(server.url + "/.well-known/jwks.json", timeout=5).json()


def readyz(server) -> dict:
    return httpx.get(server.url + "/readyz", timeout=5).json()


def metric(server, name: str) -> float:
    text = httpx.get(
        server.url + "/metrics",
        headers={"Authorization": f"Bearer {server.metrics_token}"},
        timeout=10,
    ).text
    return next(
        float(line.split()[-1]) for line in text.splitlines() if line.startswith(name + " ")
    )


def test_a_grant_from_one_replica_verifies_against_the_other_and_two_keys_are_reported():
    deployment, (one, two) = replicas()
    try:
        decision, action_id, agent = approved_grant(deployment, through=one)
        # Verified the way the payment side does it: the other replica's JWKS.
        claims = verify_grant(
            decision["grant"], decision["payload"], jwks=jwks(two), action_id=action_id
        )
        assert claims.action_id == action_id
        assert {k["kid"] for k in jwks(one)["keys"]} == {k["kid"] for k in jwks(two)["keys"]}
        assert len(jwks(two)["keys"]) == 2
        # The second replica found the first one's key when it started: the check warned.
        assert "impri.W003" in two.output()
        for server in (one, two):
            ready = readyz(server)
            assert ready["status"] == "ok"
            assert ready["grant_signing_keys"]["count"] == 2
            assert "IMPRI_GRANT_SIGNING_KEY_FILE" in ready["grant_signing_keys"]["warning"]
            assert metric(server, "impri_grant_signing_keys") == 2
        check = deployment.impri("check", IMPRI_DATA_DIR=str(deployment.data_dir), check=False)
        assert "impri.W003" in check.stderr + check.stdout
        # A report carrying the grant, made through the other replica, is accepted.
        with two.client(agent) as client:
            report = {"status": "executed", "grant": decision["grant"]}
            assert client.post(f"/actions/{action_id}/result", json=report).status_code == 200
    finally:
        deployment.close()


def test_with_the_key_given_to_both_there_is_one_key_and_no_warning(tmp_path):
    key_file = tmp_path / "grant_key"
    key_file.write_text(new_pem())
    deployment, (one, two) = replicas(IMPRI_GRANT_SIGNING_KEY_FILE=str(key_file))
    try:
        decision, action_id, _ = approved_grant(deployment, through=two)
        verify_grant(decision["grant"], decision["payload"], jwks=jwks(one), action_id=action_id)
        assert len(jwks(one)["keys"]) == len(jwks(two)["keys"]) == 1
        for server in (one, two):
            assert "impri.W003" not in server.output()
            assert readyz(server)["grant_signing_keys"] == {"count": 1}
            assert metric(server, "impri_grant_signing_keys") == 1
        check = deployment.impri("check")
        assert "W003" not in check.stderr + check.stdout
    finally:
        deployment.close()


def kids(server) -> set[str]:
    return {k["kid"] for k in jwks(server)["keys"]}


def test_a_live_replicas_key_is_not_retired_and_once_forced_a_restart_does_not_publish_it():
    """`grantkey retire` refuses the key a running replica signs with; --force retires it,
    and that replica, restarted with the key still in its data directory, publishes nothing."""
    deployment = Deployment()
    data_one = tempfile.mkdtemp(prefix="impri-replica-")
    one = deployment.start_server(IMPRI_DATA_DIR=data_one)
    two = deployment.start_server(IMPRI_DATA_DIR=tempfile.mkdtemp(prefix="impri-replica-"))
    try:
        decision, action_id, agent = approved_grant(deployment, through=one)
        kid_one = jwks(one)["keys"][0]["kid"]
        refused = deployment.impri("grantkey", "retire", "--", kid_one, check=False)
        assert refused.returncode != 0
        assert "in use by a running process" in refused.stderr
        assert "IMPRI_KEY_LIVE_S" in refused.stderr
        assert kid_one in kids(two)

        deployment.impri("grantkey", "retire", "--force", "--", kid_one)
        assert kid_one not in kids(one) | kids(two)
        one.stop()
        again = deployment.start_server(IMPRI_DATA_DIR=data_one)
        assert kid_one not in kids(again) | kids(two)
        assert "was retired (impri grantkey retire)" in again.output()
        # The decision made before still reads back with the grant it was given.
        with two.client(agent) as client:
            read = client.get(f"/actions/{action_id}/decision?timeout_s=0").json()
        assert read["grant"] == decision["grant"]
    finally:
        deployment.close()
