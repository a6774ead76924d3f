"""A second factor for money: TOTP enrolment, the code after the password, recovery codes,
IMPRI_REQUIRE_2FA, IdP MFA, and step-up on approvals at or above IMPRI_STEP_UP_CENTS.

Codes are computed here from the device's secret with django-otp's own RFC 6238
function, at times pinned with time-machine (a code works once per 30-second step).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client
from django.utils import timezone
from django_otp.oath import totp
from django_otp.plugins.otp_static.models import StaticToken
from django_otp.plugins.otp_totp.models import TOTPDevice

from approvals.models import ActionStatus, ApiKey
from audit.models import AuditEvent
from tests.conftest import ApiClient
from tests.factories import make_action

T0 = datetime(2026, 3, 2, 9, 0, 0, tzinfo=UTC)


def code(device: TOTPDevice) -> str:
    device.refresh_from_db()
    number = totp(device.bin_key, device.step, device.t0, device.digits, device.drift)
    return f"{number:0{device.digits}d}"


def enrol(user: User) -> TOTPDevice:
    return TOTPDevice.objects.create(user=user, name="Authenticator app", confirmed=True)


def password_login(username: str) -> Client:
    client = Client()
    response = client.post(
        "/accounts/login/", {"username": username, "password": f"{username}-password"}
    )
    assert response.status_code == 302, response.content  # pinned: a redirect on success
    return client


def events(name: str):
    return list(AuditEvent.objects.filter(event=name).order_by("seq"))


@pytest.fixture
def clock():
    with time_machine.travel(T0, tick=False) as traveller:
        yield traveller


# --- Enrolment ----------------------------------------------------------------------------------


def test_enrolment_confirms_with_a_code_and_shows_ten_recovery_codes_once(rita, clock):
    client = password_login("rita")
    page = client.get("/accounts/2fa/")
    assert page.status_code == 200
    body = page.content.decode()
    assert "<svg" in body and "Set up two-factor" in body
    secret = re.search(r"data-secret>([A-Z2-7]+)<", body).group(1)
    device = TOTPDevice.objects.get(user=rita.user, confirmed=False)
    assert len(secret) == 32  # the 20-byte key, as an app types it

    wrong = client.post("/accounts/2fa/", {"code": "000000"})
    assert wrong.status_code == 422
    assert "not right" in wrong.content.decode()
    clock.shift(timedelta(seconds=31))  # past the throttle after a wrong code

    done = client.post("/accounts/2fa/", {"code": code(device)})
    assert done.status_code == 200
    shown = re.findall(r"data-recovery-code>([a-z2-7]+)<", done.content.decode())
    assert len(shown) == 10
    device.refresh_from_db()
    assert device.confirmed
    assert sorted(shown) == sorted(
        StaticToken.objects.filter(device__user=rita.user).values_list("token", flat=True)
    )
    [event] = events("twofactor.enrolled")
    assert event.actor_id == "rita" and event.data["recovery_codes"] == 10
    assert not any(c in str(event.data) for c in shown)  # never the codes themselves

    again = client.get("/accounts/2fa/").content.decode()
    assert "Recovery codes left" in again
    assert not any(c in again for c in shown)  # shown once


def test_the_enrolment_secret_stays_the_same_until_confirmed(rita):
    client = password_login("rita")
    first = re.search(r"data-secret>(\w+)<", client.get("/accounts/2fa/").content.decode())
    second = re.search(r"data-secret>(\w+)<", client.get("/accounts/2fa/").content.decode())
    assert first.group(1) == second.group(1)
    assert TOTPDevice.objects.filter(user=rita.user).count() == 1


# --- Login ----------------------------------------------------------------------------------------


def test_a_password_alone_reaches_only_the_code_page(rita, clock):
    device = enrol(rita.user)
    client = password_login("rita")
    inbox = client.get("/inbox/")
    assert inbox.status_code == 302
    assert inbox["Location"] == "/accounts/2fa/verify/?next=%2Finbox%2F"
    assert client.get("/inbox/decided/")["Location"].startswith("/accounts/2fa/verify/")
    assert client.get("/accounts/2fa/verify/").status_code == 200

    wrong = client.post("/accounts/2fa/verify/", {"code": "123456", "next": "/inbox/"})
    assert wrong.status_code == 422
    assert client.get("/inbox/").status_code == 302
    clock.shift(timedelta(seconds=31))

    right = client.post("/accounts/2fa/verify/", {"code": code(device), "next": "/inbox/"})
    assert right.status_code == 302 and right["Location"] == "/inbox/"
    assert client.get("/inbox/").status_code == 200


def test_a_code_is_not_accepted_twice(rita, clock):
    device = enrol(rita.user)
    first = password_login("rita")
    used = code(device)
    assert first.post("/accounts/2fa/verify/", {"code": used}).status_code == 302
    second = password_login("rita")
    assert second.post("/accounts/2fa/verify/", {"code": used}).status_code == 422


def test_the_verify_page_never_redirects_off_site(rita, clock):
    device = enrol(rita.user)
    client = password_login("rita")
    response = client.post(
        "/accounts/2fa/verify/", {"code": code(device), "next": "https://evil.example/"}
    )
    assert response["Location"] == "/inbox/"


def test_a_recovery_code_works_once(rita, clock):
    enrol(rita.user)
    client = password_login("rita")
    # Enrolment's codes, issued through the page's renewal after a first verification.
    device = TOTPDevice.objects.get(user=rita.user)
    client.post("/accounts/2fa/verify/", {"code": code(device)})
    clock.shift(timedelta(seconds=30))
    renewed = client.post("/accounts/2fa/recovery-codes/", {"code": code(device)})
    codes = re.findall(r"data-recovery-code>([a-z2-7]+)<", renewed.content.decode())
    assert len(codes) == 10

    other = password_login("rita")
    assert other.post("/accounts/2fa/verify/", {"code": codes[0].upper()}).status_code == 302
    assert other.get("/inbox/").status_code == 200
    [used] = events("twofactor.recovery_code_used")
    assert used.data["recovery_codes_left"] == 9

    clock.shift(timedelta(seconds=30))  # past any throttle: the refusal is the code's own
    third = password_login("rita")
    assert third.post("/accounts/2fa/verify/", {"code": codes[0]}).status_code == 422
    assert third.get("/inbox/").status_code == 302


def test_without_an_authenticator_nothing_changes_by_default(rita):
    client = password_login("rita")
    assert client.get("/inbox/").status_code == 200


def test_require_2fa_sends_a_user_without_an_authenticator_to_enrolment(rita, settings, clock):
    settings.IMPRI_REQUIRE_2FA = True
    client = password_login("rita")
    response = client.get("/inbox/")
    assert response.status_code == 302
    assert response["Location"] == "/accounts/2fa/?next=%2Finbox%2F"
    htmx = client.get("/inbox/", headers={"HX-Request": "true"})
    assert htmx.status_code == 204 and htmx["HX-Redirect"].startswith("/accounts/2fa/")

    page = client.get("/accounts/2fa/?next=/inbox/").content.decode()
    assert "required" in page
    device = TOTPDevice.objects.get(user=rita.user, confirmed=False)
    done = client.post("/accounts/2fa/", {"code": code(device), "next": "/inbox/"})
    assert 'href="/inbox/"' in done.content.decode()
    assert client.get("/inbox/").status_code == 200


def test_mfa_asserted_by_the_identity_provider_skips_the_code(rita):
    enrol(rita.user)
    client = password_login("rita")
    session = client.session
    session["impri_amr"] = ["pwd", "mfa"]
    session.save()
    assert client.get("/inbox/").status_code == 200

    single = password_login("rita")
    session = single.session
    session["impri_amr"] = ["pwd"]
    session.save()
    assert single.get("/inbox/").status_code == 302


def test_the_providers_mfa_counts_for_step_up_only_from_when_it_happened(rita, clock):
    from approvals.stepup import STEP_UP_WINDOW
    from twofactor import services as twofactor

    long_ago = password_login("rita")
    session = long_ago.session
    session["impri_amr"] = ["pwd", "mfa"]
    session["impri_auth_time"] = (timezone.now() - STEP_UP_WINDOW * 3).timestamp()
    session.save()
    assert long_ago.get("/inbox/").status_code == 200  # no code asked at login
    stamped = twofactor.verified_at(long_ago.session)
    assert stamped is not None and timezone.now() - stamped > STEP_UP_WINDOW  # not fresh

    unsaid = password_login("rita")
    session = unsaid.session
    session["impri_amr"] = ["pwd", "mfa"]
    session.save()
    assert unsaid.get("/inbox/").status_code == 200
    assert twofactor.verified_at(unsaid.session) is None  # no auth_time: no step-up credit

    just_now = password_login("rita")
    session = just_now.session
    session["impri_amr"] = ["pwd", "mfa"]
    session["impri_auth_time"] = timezone.now().timestamp()
    session.save()
    just_now.get("/inbox/")
    assert timezone.now() - twofactor.verified_at(just_now.session) <= STEP_UP_WINDOW


def test_turning_it_off_needs_a_code_and_is_audited(rita, clock):
    device = enrol(rita.user)
    client = password_login("rita")
    client.post("/accounts/2fa/verify/", {"code": code(device)})
    clock.shift(timedelta(seconds=30))
    assert client.post("/accounts/2fa/remove/", {"code": "nope"}).status_code == 302
    assert TOTPDevice.objects.filter(user=rita.user).exists()
    clock.shift(timedelta(seconds=30))
    client.post("/accounts/2fa/remove/", {"code": code(device)})
    assert not TOTPDevice.objects.filter(user=rita.user).exists()
    [event] = events("twofactor.device_removed")
    assert event.actor_id == "rita" and event.data["user"] == "rita"


def test_an_admin_resets_a_reviewers_devices(rita, clock):
    enrol(rita.user)
    User.objects.create_superuser("root", password="root-password")
    admin = password_login("root")
    response = admin.post(
        "/admin/auth/user/",
        {"action": "reset_two_factor", "_selected_action": [rita.user.pk]},
    )
    assert response.status_code == 302
    assert not TOTPDevice.objects.filter(user=rita.user).exists()
    [event] = events("twofactor.device_removed")
    assert event.actor_id == "root" and event.data["user"] == "rita"


def test_the_admin_shows_who_has_two_factor_and_never_a_secret(rita):
    device = enrol(rita.user)
    User.objects.create_superuser("root", password="root-password")
    admin = password_login("root")
    users = admin.get("/admin/auth/user/")
    assert users.status_code == 200
    assert "two-factor" in users.content.decode()
    assert admin.get("/admin/otp_totp/totpdevice/").status_code == 404
    assert admin.get("/admin/otp_static/staticdevice/").status_code == 404
    assert device.key not in admin.get(f"/admin/auth/user/{rita.user.pk}/change/").content.decode()


# --- Step-up ------------------------------------------------------------------------------------


@pytest.fixture
def step_up(settings):
    settings.IMPRI_STEP_UP_CENTS = 5000  # $50: the $84 refund is above it


def approve(client: Client, action, **extra):
    return client.post(
        f"/inbox/actions/{action.pk}/decide",
        {"approve-verdict": "approve", "approve-payload.amount_cents": "8400", **extra},
    )


def test_step_up_in_the_inbox_is_refused_then_accepted(agent, rita, step_up, clock):
    device = enrol(rita.user)
    client = password_login("rita")
    assert client.post("/accounts/2fa/verify/", {"code": code(device)}).status_code == 302
    first = make_action(agent.agent)
    assert approve(client, first).status_code == 302  # the login's code is fresh

    clock.shift(timedelta(minutes=10, seconds=1))
    action = make_action(agent.agent)
    page = client.get(f"/inbox/actions/{action.pk}").content.decode()
    assert 'name="stepup-code"' in page  # the prompt is on the form before a try

    refused = approve(client, action)
    assert refused.status_code == 422
    assert "second factor" in refused.content.decode()
    action.refresh_from_db()
    assert action.status == ActionStatus.PENDING
    [event] = events("stepup.refused")
    assert event.action_id == action.pk and event.data["credential"] == "session"
    assert event.data["amount_cents"] == 8400 and event.data["step_up_cents"] == 5000

    bad = approve(client, action, **{"stepup-code": "000000"})
    assert bad.status_code == 422
    clock.shift(timedelta(seconds=31))
    accepted = approve(client, action, **{"stepup-code": code(device)})
    assert accepted.status_code == 302
    action.refresh_from_db()
    assert action.status == ActionStatus.APPROVED
    assert len(events("stepup.verified")) == 1

    clock.shift(timedelta(minutes=9))  # still within ten minutes of the step-up
    later = make_action(agent.agent)
    assert approve(client, later).status_code == 302


def test_an_edit_approval_is_checked_on_the_amount_it_approves(agent, rita, step_up, clock):
    client = password_login("rita")  # no authenticator: only amounts below the limit
    action = make_action(agent.agent)
    page = client.get(f"/inbox/actions/{action.pk}").content.decode()
    assert "set it up" in page
    refused = approve(client, action, **{"approve-payload.amount_cents": "6000"})
    assert refused.status_code == 422
    below = approve(client, action, **{"approve-payload.amount_cents": "4999"})
    assert below.status_code == 302
    action.refresh_from_db()
    assert action.status == ActionStatus.APPROVED and action.payload["amount_cents"] == 4999


def test_a_service_token_cannot_approve_at_the_limit_but_an_ordinary_token_can(
    agent, rita, sam, step_up
):
    _, raw = _service_token("rita")
    service = ApiClient(raw)
    action = make_action(agent.agent)
    refused = service.post(f"/actions/{action.pk}/approve")
    assert refused.status_code == 403
    body = refused.json()
    assert body["code"] == "step_up_required"
    assert "service token" in body["detail"] and "IMPRI_STEP_UP_CENTS" in body["detail"]
    assert body["amount_cents"] == 8400 and body["step_up_cents"] == 5000
    action.refresh_from_db()
    assert action.status == ActionStatus.PENDING
    [event] = events("stepup.refused")
    assert event.data["credential"] == "service_token" and event.data["key_prefix"]

    small = make_action(agent.agent, payload={"amount_cents": 4999, "currency": "USD"})
    assert service.post(f"/actions/{small.pk}/approve").status_code == 200

    # The reviewer's own token: their credential, used by them (docs/2fa.md).
    assert sam.client().post(f"/actions/{action.pk}/approve").status_code == 200
    action.refresh_from_db()
    assert action.status == ActionStatus.APPROVED


def test_an_amount_written_as_text_or_nested_still_needs_step_up(agent, rita, step_up):
    _, raw = _service_token("rita")
    # An undeclared kind: the detector reads nested money and digits as text.
    action = make_action(
        agent.agent,
        kind="billing.payout",
        payload={"lines": [{"amount_cents": "900000"}], "currency": "USD"},
        editable=[],
    )
    assert ApiClient(raw).post(f"/actions/{action.pk}/approve").status_code == 403


def test_step_up_is_off_by_default(agent, rita):
    _, raw = _service_token("rita")
    action = make_action(agent.agent, payload={"amount_cents": 10**9, "currency": "USD"})
    assert ApiClient(raw).post(f"/actions/{action.pk}/approve").status_code == 200


def test_a_rejection_never_needs_step_up(agent, rita, step_up):
    _, raw = _service_token("rita")
    action = make_action(agent.agent)
    assert ApiClient(raw).post(f"/actions/{action.pk}/reject").status_code == 200


def test_an_outsider_learns_nothing_from_step_up(agent, mallory, step_up):
    action = make_action(agent.agent)
    mallory_key = ApiKey.objects.get(user=mallory.user)
    ApiKey.objects.filter(pk=mallory_key.pk).update(is_service=True)
    response = mallory.client().post(f"/actions/{action.pk}/approve")
    assert response.status_code == 404 and response.json()["code"] == "not_found"
    assert not events("stepup.refused")


def _service_token(username: str):
    from io import StringIO

    out = StringIO()
    call_command("token", username, "--service", stdout=out)
    text = out.getvalue()
    assert text.startswith("Service token for")
    raw = re.search(r"Reviewer token: (\S+)", text).group(1)
    key = ApiKey.objects.get(prefix=raw[: len(ApiKey.PREFIXES["reviewer"]) + 6])
    assert key.is_service
    return key, raw


def test_impri_token_issues_an_ordinary_token_by_default(rita):
    from io import StringIO

    out = StringIO()
    call_command("token", "rita", stdout=out)
    raw = re.search(r"Reviewer token: (\S+)", out.getvalue()).group(1)
    assert not ApiKey.objects.get(prefix=raw[:12]).is_service


# --- The live socket ------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
async def test_the_live_socket_waits_for_the_code_too(rita):
    from asgiref.sync import sync_to_async
    from channels.testing import WebsocketCommunicator

    from impri.asgi import application

    device = await sync_to_async(enrol)(rita.user)
    client = await sync_to_async(password_login)("rita")
    headers = [
        (b"origin", b"http://localhost"),
        (b"host", b"localhost"),
        (b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode()),
    ]

    refused = WebsocketCommunicator(application, "/ws/inbox", headers=headers)
    connected, close_code = await refused.connect(timeout=5)
    assert (connected, close_code) == (False, 4401)
    await refused.disconnect()

    answer = await sync_to_async(client.post)(
        "/accounts/2fa/verify/", {"code": await sync_to_async(code)(device)}
    )
    assert answer.status_code == 302
    accepted = WebsocketCommunicator(application, "/ws/inbox", headers=headers)
    connected, _ = await accepted.connect(timeout=5)
    assert connected
    await accepted.disconnect()


@pytest.mark.parametrize(
    ("step_up", "require_2fa", "sso_only", "warned"),
    [
        (50000, False, False, True),  # step-up on, enrolment optional, passwords open
        (50000, True, False, False),
        (50000, False, True, False),
        (None, False, False, False),  # no step-up: nothing to weaken
    ],
)
def test_a_system_check_warns_when_step_up_is_on_but_enrolment_is_optional(
    settings, step_up, require_2fa, sso_only, warned
):
    from twofactor.checks import step_up_without_required_enrolment

    settings.IMPRI_STEP_UP_CENTS = step_up
    settings.IMPRI_REQUIRE_2FA = require_2fa
    settings.IMPRI_OIDC_SSO_ONLY = sso_only
    messages = step_up_without_required_enrolment()
    assert [m.id for m in messages] == (["impri.W002"] if warned else [])
