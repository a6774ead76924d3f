"""A live server with an agent key and a reviewer token, for the impri_client tests."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass

import httpx

from tests.live import Deployment, Server
from tests.waits import eventually


@dataclass
class Live:
    deployment: Deployment
    server: Server
    agent_key: str
    reviewer_key: str

    @property
    def url(self) -> str:
        return self.server.url

    def reviewer(self) -> Reviewer:
        return Reviewer(self.server.client(self.reviewer_key))


def start_live(**env: str) -> Live:
    deployment = Deployment(**env)
    try:
        server = deployment.start_server()
        agent_key, reviewer_key = deployment.agent_and_reviewer()
    except BaseException:
        deployment.close()
        raise
    return Live(deployment, server, agent_key, reviewer_key)


class Reviewer:
    """Rita, deciding over REST with her reviewer token."""

    def __init__(self, http: httpx.Client):
        self.http = http

    def pending_titled(self, title: str, timeout: float = 30.0) -> dict:
        def find():
            page = self.http.get("/actions", params={"status": "pending", "limit": 200})
            assert page.status_code == 200, page.text
            return next((a for a in page.json()["items"] if a["title"] == title), None)

        return eventually(find, timeout)

    def approve(self, action_id: str, edits: dict | None = None, note: str = "") -> dict:
        body = {"edits": edits or {}, "note": note}
        response = self.http.post(f"/actions/{action_id}/approve", json=body)
        assert response.status_code == 200, response.text
        return response.json()

    def reject(self, action_id: str, note: str = "", reason: str | None = None) -> dict:
        body = {"note": note}
        if reason is not None:
            body["reason"] = reason
        response = self.http.post(f"/actions/{action_id}/reject", json=body)
        assert response.status_code == 200, response.text
        return response.json()

    def audit(self, action_id: str) -> list[dict]:
        response = self.http.get("/audit", params={"action_id": action_id})
        assert response.status_code == 200, response.text
        return response.json()["items"]


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class Signer:
    """An Ed25519 key as Impri holds one, and its JWKS."""

    def __init__(self, kid: str):
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
        from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

        self.kid = kid
        self.key = Ed25519PrivateKey.generate()
        raw = self.key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        self.jwk = {"kty": "OKP", "crv": "Ed25519", "x": b64url(raw), "kid": kid, "alg": "EdDSA", "use": "sig"}  # fmt: skip

    def grant(self, claims: dict, **header) -> str:
        head = {"alg": "EdDSA", "kid": self.kid, "typ": "JWT", **header}
        signing_input = f"{b64url(json.dumps(head).encode())}.{b64url(json.dumps(claims).encode())}"
        return signing_input + "." + b64url(self.key.sign(signing_input.encode()))
