"""Registering and using passkeys (WebAuthn Level 2, through the ``webauthn`` package).

Each ceremony has two steps: the server hands the browser options with a fresh
challenge (kept in the session, used once), and checks what the authenticator
signed: the challenge, this site's origin and relying-party id, user presence and
user verification (the fingerprint, face or screen lock). The relying party is the
host of ``IMPRI_BASE_URL`` (else the request's host), so a passkey made for one
Impri is useless on any other public_url.

Registering needs a session that may act (verified already, or one that is to enrol)
and leaves the session verified; using one verifies the session like a code does and
stamps it for step-up (adding a passkey is not using it). Both are
audited: ``twofactor.passkey_registered``, ``twofactor.passkey_used`` (and
``stepup.verified`` when it was for an approval); removal is audited by a signal.
"""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import django_otp
from django.db import transaction
from django.utils import timezone

from audit import log as audit
from audit.identity import user_ref
from audit.models import ActorType
from plumbing import public_url, strict_json

from . import services
from .models import PasskeyDevice

if TYPE_CHECKING:
    from webauthn.helpers.structs import PublicKeyCredentialDescriptor

# webauthn (and pyasn1 with its modules, ~3 MB) is imported by the functions that use it,
# not here: the URL configuration imports this module in every serve process, and few of
# them ever see a passkey (issue 34, serve's memory).

SESSION_CHALLENGE = "impri_passkey_challenge"
RP_NAME = "Impri"
MAX_NAME = 64


class Failed(Exception):
    """The ceremony did not prove what it should; the message says what, for the reviewer."""


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def unb64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def origin(request) -> str:
    return public_url.base_url(f"{request.scheme}://{request.get_host()}")


def rp_id(request) -> str:
    return urlsplit(origin(request)).hostname or ""


def passkeys(user):
    return PasskeyDevice.objects.filter(user=user, confirmed=True).order_by("created_at")


def _challenge(request, purpose: str, challenge: bytes) -> None:
    request.session[SESSION_CHALLENGE] = {"purpose": purpose, "challenge": b64url(challenge)}


def _take_challenge(request, purpose: str) -> bytes:
    saved = request.session.pop(SESSION_CHALLENGE, None)  # used once, whatever happens next
    if not isinstance(saved, dict) or saved.get("purpose") != purpose:
        raise Failed("start again: this passkey request has expired or was already used")
    return unb64url(saved["challenge"])


def _descriptors(user) -> list[PublicKeyCredentialDescriptor]:
    # deferred: webauthn: loaded when a passkey is used, not at serve's start (tests/project/test_serve_footprint.py)
    from webauthn.helpers.structs import PublicKeyCredentialDescriptor

    return [PublicKeyCredentialDescriptor(id=unb64url(p.credential_id)) for p in passkeys(user)]


# --- Registering ------------------------------------------------------------------------


def registration_options(request) -> str:
    # deferred: webauthn: loaded when a passkey is used, not at serve's start (tests/project/test_serve_footprint.py)
    from webauthn import generate_registration_options, options_to_json

    # deferred: webauthn: loaded when a passkey is used, not at serve's start (tests/project/test_serve_footprint.py)
    from webauthn.helpers.structs import (
        AuthenticatorSelectionCriteria,
        ResidentKeyRequirement,
        UserVerificationRequirement,
    )

    user = request.user
    options = generate_registration_options(
        rp_id=rp_id(request),
        rp_name=RP_NAME,
        user_id=f"impri-user-{user.pk}".encode(),
        user_name=user.get_username(),
        user_display_name=user.get_full_name() or user.get_username(),
        exclude_credentials=_descriptors(user),
        authenticator_selection=AuthenticatorSelectionCriteria(
            resident_key=ResidentKeyRequirement.PREFERRED,
            user_verification=UserVerificationRequirement.REQUIRED,
        ),
    )
    _challenge(request, "register", options.challenge)
    return options_to_json(options)


def register(request, credential: dict, name: str) -> PasskeyDevice:
    # deferred: webauthn: loaded when a passkey is used, not at serve's start (tests/project/test_serve_footprint.py)
    from webauthn import verify_registration_response

    # deferred: webauthn: loaded when a passkey is used, not at serve's start (tests/project/test_serve_footprint.py)
    from webauthn.helpers.exceptions import WebAuthnException

    user = request.user
    challenge = _take_challenge(request, "register")
    try:
        verified = verify_registration_response(
            credential=credential,
            expected_challenge=challenge,
            expected_rp_id=rp_id(request),
            expected_origin=origin(request),
            require_user_verification=True,
        )
    except (WebAuthnException, ValueError, KeyError, TypeError) as exc:
        raise Failed(f"the passkey could not be registered: {exc}") from None
    label = " ".join(str(name or "").split())[:MAX_NAME] or "Passkey"
    credential_id = b64url(verified.credential_id)
    transports = credential.get("response", {}).get("transports") or []
    with transaction.atomic():
        if PasskeyDevice.objects.filter(credential_id=credential_id).exists():
            raise Failed("this passkey is registered already")
        device = PasskeyDevice.objects.create(
            user=user,
            name=label,
            confirmed=True,
            credential_id=credential_id,
            public_key=b64url(verified.credential_public_key),
            sign_count=verified.sign_count,
            transports=[t for t in transports if isinstance(t, str)][:8],
        )
        audit.record(
            "twofactor.passkey_registered",
            actor_type=ActorType.REVIEWER,
            actor_id=user.get_username(),
            actor_ref=user_ref(user),
            data={"device": device.name, "passkeys": passkeys(user).count()},
        )
    # The session now counts as verified (an enrolment is complete); step-up for money waits
    # for the passkey to be used, not just added.
    django_otp.login(request, device)
    return device


# --- Using one --------------------------------------------------------------------------


def authentication_options(request) -> str:
    # deferred: webauthn: loaded when a passkey is used, not at serve's start (tests/project/test_serve_footprint.py)
    from webauthn import generate_authentication_options, options_to_json

    # deferred: webauthn: loaded when a passkey is used, not at serve's start (tests/project/test_serve_footprint.py)
    from webauthn.helpers.structs import UserVerificationRequirement

    options = generate_authentication_options(
        rp_id=rp_id(request),
        allow_credentials=_descriptors(request.user),
        user_verification=UserVerificationRequirement.REQUIRED,
    )
    _challenge(request, "authenticate", options.challenge)
    return options_to_json(options)


def authenticate(request, credential: dict, *, step_up: bool = False) -> PasskeyDevice:
    """Check an assertion by one of the user's passkeys; the session is verified and stamped."""
    # deferred: webauthn: loaded when a passkey is used, not at serve's start (tests/project/test_serve_footprint.py)
    from webauthn import verify_authentication_response

    # deferred: webauthn: loaded when a passkey is used, not at serve's start (tests/project/test_serve_footprint.py)
    from webauthn.helpers.exceptions import WebAuthnException

    user = request.user
    challenge = _take_challenge(request, "authenticate")
    raw_id = credential.get("rawId") or credential.get("id")
    if not isinstance(raw_id, str):
        raise Failed("the browser sent no passkey")
    with transaction.atomic():
        device = passkeys(user).select_for_update().filter(credential_id=raw_id.rstrip("=")).first()
        if device is None:
            raise Failed("that passkey is not one of yours here")
        try:
            verified = verify_authentication_response(
                credential=credential,
                expected_challenge=challenge,
                expected_rp_id=rp_id(request),
                expected_origin=origin(request),
                credential_public_key=unb64url(device.public_key),
                credential_current_sign_count=device.sign_count,
                require_user_verification=True,
            )
        except (WebAuthnException, ValueError, KeyError, TypeError) as exc:
            raise Failed(f"the passkey did not verify: {exc}") from None
        device.sign_count = verified.new_sign_count
        device.last_used_at = timezone.now()
        device.save(update_fields=["sign_count", "last_used_at"])
        data = {"device": device.name, "method": "passkey"}
        services.record_user("twofactor.passkey_used", user, data)
        if step_up:
            services.record_user("stepup.verified", user, data)
    django_otp.login(request, device)
    services.stamp(request.session)
    return device


def parse(body: bytes) -> dict:
    try:
        data = strict_json.loads(body or b"{}")
    except strict_json.Refused as exc:
        raise Failed(f"the request must be JSON that reads one way: {exc}") from None
    except ValueError:
        raise Failed("the request must be JSON") from None
    if not isinstance(data, dict) or not isinstance(data.get("credential", {}), dict):
        raise Failed("the request must be a JSON object with the credential")
    return data
