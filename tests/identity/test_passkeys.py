"""Passkey endpoints refuse what is not a passkey ceremony, without a 500 (issue 32).

The ceremonies themselves run in real Chromium with a virtual authenticator
(tests/identity/test_passkeys_browser.py); these are the refusals around them.
"""

from __future__ import annotations

import json

import pytest
from django.test import Client
from django_otp.plugins.otp_totp.models import TOTPDevice

from twofactor.models import PasskeyDevice

GARBAGE = [
    b"",
    b"{",
    b"[]",
    json.dumps({"credential": "x"}).encode(),
    json.dumps({"credential": {}}).encode(),
    json.dumps({"credential": {"id": "AAAA", "rawId": "AAAA", "type": "public-key"}}).encode(),
    json.dumps(
        {"credential": {"id": "x", "rawId": "!!", "type": "public-key", "response": "no"}}
    ).encode(),
    json.dumps(
        {
            "credential": {
                "id": "AAAA",
                "rawId": "AAAA",
                "type": "public-key",
                "response": {"clientDataJSON": "e30", "attestationObject": "oA"},
            }
        }
    ).encode(),
]


def signed_in(persona) -> Client:
    client = Client()
    client.force_login(persona.user)
    return client


def post(client: Client, path: str, body: bytes = b"{}"):
    return client.post(f"/accounts/2fa/passkeys/{path}", body, "application/json")


@pytest.mark.django_db
@pytest.mark.parametrize("body", GARBAGE)
def test_a_registration_that_is_not_a_ceremony_is_a_400(rita, body):
    client = signed_in(rita)
    assert post(client, "register/options").status_code == 200
    answer = post(client, "register", body)
    assert answer.status_code == 400 and "error" in answer.json()
    assert not PasskeyDevice.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("body", GARBAGE)
def test_an_assertion_that_is_not_a_ceremony_is_a_400(rita, body):
    PasskeyDevice.objects.create(
        user=rita.user, name="Pat's phone", confirmed=True, credential_id="AAAA", public_key="pQ"
    )
    client = signed_in(rita)
    assert post(client, "auth/options").status_code == 200
    answer = post(client, "auth", body)
    assert answer.status_code == 400 and "error" in answer.json()


@pytest.mark.django_db
def test_options_are_needed_first_and_used_once(rita):
    client = signed_in(rita)
    assert "expired" in post(client, "register", GARBAGE[-1]).json()["error"]
    options = json.loads(post(client, "register/options").content)
    assert options["rp"]["id"] == "testserver" and options["user"]["name"] == "rita"
    assert post(client, "register", GARBAGE[-1]).status_code == 400
    assert "expired" in post(client, "register", GARBAGE[-1]).json()["error"]


@pytest.mark.django_db
def test_a_password_alone_adds_no_passkey_to_a_protected_account(rita):
    TOTPDevice.objects.create(user=rita.user, name="Authenticator app", confirmed=True)
    client = signed_in(rita)  # a password, no code yet
    assert post(client, "register/options").status_code == 403
    assert post(client, "register", GARBAGE[-1]).status_code == 403
    anonymous = Client()
    assert post(anonymous, "auth/options").status_code == 401
    assert post(anonymous, "register/options").status_code == 403
