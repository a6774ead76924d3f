"""A second factor for reviewers: TOTP enrolment, verification, recovery codes, removal.

Devices are django-otp's (``TOTPDevice`` for the authenticator app, one
``StaticDevice`` holding the ten single-use recovery codes). A session is
verified when django-otp remembers the device that verified it
(``request.user.otp_device``, kept by ``OTPMiddleware``) or when the identity
provider asserted multi-factor authentication at sign-in (``impri_amr``, set
by the SSO login). The time of the last second factor is kept in the session
(``impri_2fa_at``) for step-up (``approvals.stepup``): money at or above
``IMPRI_STEP_UP_CENTS`` needs a second factor from the last ten minutes.
"""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta

import django_otp
from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django_otp.models import Device
from django_otp.plugins.otp_static.models import StaticDevice, StaticToken
from django_otp.plugins.otp_totp.models import TOTPDevice

from approvals.stepup import STEP_UP_WINDOW
from audit import log as audit
from audit.identity import user_ref
from audit.models import ActorType

from .models import PasskeyDevice

RECOVERY_CODES = 10
SESSION_AT = "impri_2fa_at"  # when this session last passed a second factor (epoch seconds)
SESSION_AMR = "impri_amr"  # the IdP's amr claim, stored by the SSO login
SESSION_AUTH_TIME = "impri_auth_time"  # the IdP's auth_time claim (Unix seconds), likewise
# RFC 8176 methods that are a second factor (or MFA outright): a possession
# (otp, hwk, swk, sc, sms, tel), an inherence (fpt, face, iris, retina, vbm), or "mfa".
MFA_AMR = frozenset(
    {"mfa", "mca", "otp", "hwk", "swk", "sc", "sms", "tel", "fpt", "face", "iris", "retina", "vbm"}
)
AUTHENTICATOR = "Authenticator app"


def idp_asserted_mfa(session) -> bool:
    amr = session.get(SESSION_AMR)
    if not isinstance(amr, list | tuple):
        return False
    return any(isinstance(method, str) and method.lower() in MFA_AMR for method in amr)


def authenticator(user) -> TOTPDevice | None:
    """The user's confirmed authenticator app, if they enrolled one."""
    return TOTPDevice.objects.devices_for_user(user, confirmed=True).first()


def has_passkey(user) -> bool:

    return PasskeyDevice.objects.filter(user=user, confirmed=True).exists()


def has_second_factor(user) -> bool:
    """An authenticator app or a passkey: what the session must pass after the password."""
    return authenticator(user) is not None or has_passkey(user)


def recovery_codes_left(user) -> int:
    return StaticToken.objects.filter(device__user=user, device__confirmed=True).count()


def is_verified(request) -> bool:
    """This session passed a second factor (a code here, or MFA at the identity provider)."""
    user = request.user
    return bool(getattr(user, "is_verified", lambda: False)()) or idp_asserted_mfa(request.session)


def required_step(request) -> str | None:
    """What a signed-in session must do before anything else: ``verify``, ``enrol`` or nothing."""
    user = request.user
    if not user.is_authenticated or is_verified(request):
        return None
    if has_second_factor(user):
        return "verify"
    if settings.IMPRI_REQUIRE_2FA:
        return "enrol"
    return None


def session_passes(user, session) -> bool:
    """``required_step`` for a session without a request (the live socket)."""
    if session is None:
        return False
    if idp_asserted_mfa(session):
        return True
    device_id = session.get(django_otp.DEVICE_ID_SESSION_KEY)
    device = Device.from_persistent_id(device_id) if isinstance(device_id, str) else None
    if device is not None and device.user_id == user.pk and device.confirmed:
        return True
    if has_second_factor(user):
        return False
    return not settings.IMPRI_REQUIRE_2FA


# --- When the session last passed a second factor ------------------------------------------------


def idp_auth_time(session) -> datetime | None:
    """When the identity provider authenticated the person (its ``auth_time``), if it said."""
    value = session.get(SESSION_AUTH_TIME)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return datetime.fromtimestamp(value, tz=UTC)


def stamp(session, when: datetime | None = None) -> None:
    session[SESSION_AT] = (when or timezone.now()).timestamp()


def verified_at(session) -> datetime | None:
    value = session.get(SESSION_AT)
    if not isinstance(value, int | float):
        return None
    return datetime.fromtimestamp(value, tz=UTC)


def is_fresh(session, now: datetime | None = None) -> bool:
    """A second factor passed within the step-up window (ten minutes)."""
    at = verified_at(session)
    now = now or timezone.now()
    return at is not None and timedelta(0) <= now - at <= STEP_UP_WINDOW


# --- Enrolment ------------------------------------------------------------------------------------


def pending_device(user) -> TOTPDevice:
    """The unconfirmed authenticator being enrolled: the same secret until it is confirmed."""
    device = TOTPDevice.objects.devices_for_user(user, confirmed=False).order_by("pk").first()
    if device is None:
        device = TOTPDevice.objects.create(user=user, name=AUTHENTICATOR, confirmed=False)
    return device


def secret_base32(device: TOTPDevice) -> str:
    """The secret as authenticator apps take it by hand (RFC 4648 base32, no padding)."""
    return base64.b32encode(device.bin_key).decode().rstrip("=")


def qr_svg(device: TOTPDevice) -> str:
    """The otpauth:// URI as an inline SVG QR code (no image library, no external request)."""
    # deferred: segno: only an enrolment draws a QR code, never at serve's start (tests/project/test_serve_footprint.py)
    import segno  # here, not at the top: only an enrolment draws one (serve's memory, issue 34)

    return segno.make(device.config_url, error="m").svg_inline(scale=4, border=2)


def confirm(request, device: TOTPDevice, code: str) -> list[str] | None:
    """Confirm an enrolment with a code from the app; returns the new recovery codes (shown once).

    A confirmed authenticator replaces any earlier one, and the recovery codes
    are issued afresh. None when the code is wrong.
    """
    user = request.user
    with transaction.atomic():
        device = TOTPDevice.objects.select_for_update().get(pk=device.pk, user=user)
        if device.confirmed or not device.verify_token(_normal(code)):
            return None
        TOTPDevice.objects.filter(user=user).exclude(pk=device.pk).delete()
        device.confirmed = True
        device.save(update_fields=["confirmed"])
        codes = _new_recovery_codes(user)
        audit.record(
            "twofactor.enrolled",
            actor_type=ActorType.REVIEWER,
            actor_id=user.get_username(),
            actor_ref=user_ref(user),
            data={"device": device.name, "recovery_codes": len(codes)},
        )
    django_otp.login(request, device)
    stamp(request.session)
    return codes


def new_recovery_codes(request) -> list[str]:
    """A fresh set of recovery codes; the old ones stop working."""
    user = request.user
    with transaction.atomic():
        codes = _new_recovery_codes(user)
        audit.record(
            "twofactor.recovery_codes_renewed",
            actor_type=ActorType.REVIEWER,
            actor_id=user.get_username(),
            actor_ref=user_ref(user),
            data={"recovery_codes": len(codes)},
        )
    return codes


def _new_recovery_codes(user) -> list[str]:
    StaticDevice.objects.filter(user=user).delete()
    static = StaticDevice.objects.create(user=user, name="Recovery codes", confirmed=True)
    codes = [StaticToken.random_token() for _ in range(RECOVERY_CODES)]
    StaticToken.objects.bulk_create(StaticToken(device=static, token=code) for code in codes)
    return codes


# --- Verification ---------------------------------------------------------------------------------


def verify(request, code: str, *, step_up: bool = False) -> bool:
    """Check a code from the app or a recovery code (used up once accepted).

    Wrong codes slow the next try down (django-otp's throttling, per device).
    On success the session is verified and stamped; a step-up is audited.
    """
    user = request.user
    code = _normal(code)
    if not code:
        return False
    with transaction.atomic():
        device = _match(user, code)
        if device is None:
            return False
        data = {"device": device.name}
        if isinstance(device, StaticDevice):
            data["recovery_codes_left"] = device.token_set.count()
            record_user("twofactor.recovery_code_used", user, data)
        if step_up:
            record_user("stepup.verified", user, data)
    django_otp.login(request, device)
    stamp(request.session)
    return True


def _match(user, code: str):
    # Six digits are an app code, anything else a recovery code: a wrong guess
    # slows down (throttles) only the device it was meant for.
    model = TOTPDevice if len(code) == 6 and code.isdigit() else StaticDevice
    for device in model.objects.devices_for_user(user, confirmed=True).select_for_update():
        if device.verify_token(code):
            return device
    return None


def _normal(code: str) -> str:
    """Spaces dropped ("123 456"), lower case (recovery codes are base32 in lower case)."""
    return "".join(str(code).split()).lower()[:32]


def record_user(event: str, user, data: dict) -> None:
    """Append a second-factor event by the user themselves (inside the caller's transaction)."""
    audit.record(
        event,
        actor_type=ActorType.REVIEWER,
        actor_id=user.get_username(),
        actor_ref=user_ref(user),
        data=data,
    )


# --- Removal --------------------------------------------------------------------------------------


def remove_devices(user) -> int:
    """Remove the user's authenticator, passkeys and recovery codes (each removal is audited by a signal)."""

    with transaction.atomic():
        removed = TOTPDevice.objects.filter(user=user).delete()[0]
        removed += PasskeyDevice.objects.filter(user=user).delete()[0]
        StaticDevice.objects.filter(user=user).delete()
    return removed
