"""Single sign-on around the provider: who the claims are, their groups, the password form's rules.

The sign-in itself, through a real provider, is tests/identity/test_sso_e2e.py.
"""

from __future__ import annotations

import time

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from django.contrib.auth.models import Group, User
from django.core.exceptions import SuspiciousOperation
from django.test import Client

from audit.models import AuditEvent
from identity import oidc, sso
from identity.models import SsoIdentity
from tests.live import free_port
from tests.project.test_settings import settings_in

ISSUER = "https://id.example.com"
LOGIN = "/accounts/login/"


def claims(sub: str = "0001", **extra) -> dict:
    return {"sub": sub, "preferred_username": "carol", **extra}


def groups_of(user) -> list[str]:
    return sorted(user.groups.values_list("name", flat=True))


@pytest.fixture
def sso_on(settings):
    settings.IMPRI_OIDC_ENABLED = True
    settings.IMPRI_OIDC_ISSUER = f"http://127.0.0.1:{free_port()}/o"  # nobody listens there
    oidc.forget_provider()
    yield settings
    oidc.forget_provider()


# --- The password form --------------------------------------------------------------------


def test_by_default_password_login_is_unchanged_and_sso_is_not_offered(rita):
    page = Client().get(LOGIN)
    assert "Sign in with SSO" not in page.text
    assert Client().get("/accounts/oidc/authenticate/").status_code == 404
    answer = Client().post(LOGIN, {"username": "rita", "password": "rita-password"})
    assert answer.status_code == 302 and answer["Location"] == "/inbox/"


def test_the_login_page_offers_sso_when_it_is_configured(sso_on, db):
    page = Client().get(LOGIN + "?next=/inbox/decided/")
    assert 'href="/accounts/oidc/authenticate/?next=/inbox/decided/"' in page.text
    assert 'name="username"' in page.text and 'name="password"' in page.text


def test_sso_only_refuses_a_reviewers_password_with_a_clear_message(sso_on, rita):
    sso_on.IMPRI_OIDC_SSO_ONLY = True
    answer = Client().post(LOGIN, {"username": "rita", "password": "rita-password"})
    assert answer.status_code == 200
    assert "Password login is turned off for reviewers" in answer.text
    assert "_auth_user_id" not in answer.wsgi_request.session


def test_sso_only_keeps_password_login_for_staff_as_break_glass(sso_on, db):
    sso_on.IMPRI_OIDC_SSO_ONLY = True
    User.objects.create_user("ops", password="ops-password", is_staff=True)
    answer = Client().post(LOGIN, {"username": "ops", "password": "ops-password"})
    assert answer.status_code == 302


def test_an_unreachable_provider_sends_the_person_back_to_login_with_the_reason(sso_on, db):
    answer = Client().get("/accounts/oidc/authenticate/", follow=True)
    assert answer.redirect_chain == [(LOGIN, 302)]
    assert "Single sign-on is unavailable" in answer.text


def test_a_provider_refusal_comes_back_to_the_login_page(sso_on, db):
    answer = Client().get("/accounts/oidc/callback/?error=access_denied&state=x", follow=True)
    assert answer.redirect_chain == [(LOGIN, 302)]
    assert "Single sign-on failed: the identity provider answered" in answer.text


def test_password_login_works_while_the_provider_is_away(sso_on, rita, settings):
    settings.AUTHENTICATION_BACKENDS = [
        *settings.AUTHENTICATION_BACKENDS,
        "identity.oidc.ImpriOIDCBackend",
    ]
    answer = Client().post(LOGIN, {"username": "rita", "password": "rita-password"})
    assert answer.status_code == 302


def test_deactivating_an_sso_user_ends_their_session(sso_on, settings, db):
    settings.AUTHENTICATION_BACKENDS = [
        *settings.AUTHENTICATION_BACKENDS,
        "identity.oidc.ImpriOIDCBackend",
    ]
    user = sso.sign_in(ISSUER, claims())
    browser = Client()
    browser.force_login(user, backend="identity.oidc.ImpriOIDCBackend")
    assert browser.get("/inbox/").status_code == 200
    user.is_active = False
    user.save()
    assert browser.get("/inbox/").status_code == 302


# --- Who the claims are ------------------------------------------------------------------


def test_a_first_sign_in_creates_a_user_without_a_password(db):
    user = sso.sign_in(ISSUER, claims(email="carol@example.com", email_verified=True))
    assert user.username == "carol" and user.email == "carol@example.com"
    assert not user.has_usable_password()
    assert sso.sign_in(ISSUER, claims()) == user  # the same person next time, by sub
    linked = AuditEvent.objects.get(event="user.sso_linked")
    assert linked.actor_id == "oidc"
    assert linked.data == {
        "user": "carol",
        "user_ref": f"user:{user.pk}",
        "issuer": ISSUER,
        "subject": "0001",
        "how": "created",
        "source": "oidc",
    }


def test_an_existing_reviewer_is_linked_by_verified_email(rita):
    rita.user.email = "rita@example.com"
    rita.user.save()
    user = sso.sign_in(ISSUER, claims(email="RITA@example.com", email_verified=True))
    assert user == rita.user
    assert AuditEvent.objects.get(event="user.sso_linked").data["how"] == "email"


def test_an_unverified_email_links_nobody_and_a_taken_username_gets_a_suffix(rita):
    rita.user.email = "rita@example.com"
    rita.user.save()
    user = sso.sign_in(
        ISSUER, claims(preferred_username="rita", email="rita@example.com", email_verified=False)
    )
    assert user != rita.user
    assert user.username == "rita-2" and user.email == ""


def test_an_administrators_account_is_never_linked_automatically(db):
    User.objects.create_user("boss", email="boss@example.com", is_superuser=True, is_staff=True)
    with pytest.raises(sso.SsoRefused, match="administrator"):
        sso.sign_in(ISSUER, claims(email="boss@example.com", email_verified=True))
    assert not SsoIdentity.objects.exists()
    assert not User.objects.filter(username="carol").exists()


def test_a_deactivated_account_is_refused(db):
    user = sso.sign_in(ISSUER, claims())
    user.is_active = False
    user.save()
    with pytest.raises(sso.SsoRefused, match="deactivated"):
        sso.sign_in(ISSUER, claims())


def test_a_claim_without_a_subject_is_refused(db):
    with pytest.raises(sso.SsoRefused, match="sub"):
        sso.sign_in(ISSUER, {"preferred_username": "carol"})


# --- Groups ------------------------------------------------------------------------------


def test_groups_follow_the_claim_at_every_sign_in_and_each_change_is_audited(db):
    for name in ("reviewers", "finance", "support"):
        Group.objects.create(name=name)
    user = sso.sign_in(
        ISSUER, claims(groups=["reviewers", "/finance", "not-in-impri"]), groups_claim="groups"
    )
    assert groups_of(user) == ["finance", "reviewers"]
    assert not Group.objects.filter(name="not-in-impri").exists()

    user = sso.sign_in(ISSUER, claims(groups=["support", "finance"]), groups_claim="groups")
    assert groups_of(user) == ["finance", "support"]

    user = sso.sign_in(ISSUER, claims(), groups_claim="groups")  # no claim: in no group
    assert groups_of(user) == []

    changes = [
        (e.actor_type, e.actor_id, {k: v for k, v in e.data.items() if k != "user_ref"})
        for e in AuditEvent.objects.filter(event="user.groups_changed").order_by("seq")
    ]
    assert changes == [
        ("system", "oidc", {"user": "carol", "added": ["finance", "reviewers"], "source": "oidc"}),
        ("system", "oidc", {"user": "carol", "removed": ["reviewers"], "source": "oidc"}),
        ("system", "oidc", {"user": "carol", "added": ["support"], "source": "oidc"}),
        ("system", "oidc", {"user": "carol", "removed": ["finance", "support"], "source": "oidc"}),
    ]


def test_without_a_groups_claim_setting_memberships_are_left_to_admins(rita):
    rita.user.email = "rita@example.com"
    rita.user.save()
    user = sso.sign_in(ISSUER, claims(email="rita@example.com", email_verified=True, groups=[]))
    assert groups_of(user) == ["reviewers"]


def test_a_change_in_admin_is_still_attributed_to_the_person(rita):
    # The "oidc" source is for the sign-in only; it does not leak to later changes.
    sso.sign_in(ISSUER, claims())
    rita.user.groups.add(Group.objects.create(name="finance"))
    event = AuditEvent.objects.filter(event="user.groups_changed").latest("seq")
    assert event.actor_id == "system" and "source" not in event.data


# --- The ID token ------------------------------------------------------------------------


@pytest.fixture
def signed(settings):
    """An ID token signer, and a backend that trusts its key (as if read from the JWKS)."""
    settings.IMPRI_OIDC_ISSUER = ISSUER
    settings.OIDC_RP_CLIENT_ID = "impri"
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    backend = oidc.ImpriOIDCBackend()
    backend.OIDC_RP_IDP_SIGN_KEY = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )

    def sign(**overrides):
        payload = {"iss": ISSUER, "aud": "impri", "sub": "0001", "nonce": "n"}
        payload |= {"exp": int(time.time()) + 300, **overrides}
        payload = {k: v for k, v in payload.items() if v is not None}
        return jwt.encode(payload, key, algorithm="RS256")

    return backend, sign


def test_an_id_token_for_this_client_from_this_issuer_is_accepted(signed):
    backend, sign = signed
    assert backend.verify_token(sign(), nonce="n")["sub"] == "0001"
    assert backend.verify_token(sign(aud=["impri", "x"], azp="impri"), nonce="n")


@pytest.mark.parametrize(
    "claims, refused",
    [
        ({"iss": "https://evil.example.com"}, "another provider"),
        ({"aud": "someone-else"}, "another client"),
        ({"aud": ["someone-else", "impri"], "azp": "someone-else"}, "authorized for another"),
        ({"exp": None}, "no expiry"),
        ({"nonce": "replayed"}, "Nonce"),
    ],
)
def test_an_id_token_not_meant_for_impri_is_refused(signed, claims, refused):
    backend, sign = signed
    with pytest.raises(SuspiciousOperation, match=refused):
        backend.verify_token(sign(**claims), nonce="n")


def test_an_expired_id_token_is_refused(signed):

    backend, sign = signed
    with pytest.raises(jwt.ExpiredSignatureError):
        backend.verify_token(sign(exp=1), nonce="n")


# --- Configuration -----------------------------------------------------------------------


@pytest.mark.e2e  # a subprocess reads the settings afresh
def test_half_an_sso_configuration_fails_loudly(tmp_path):
    result = settings_in(tmp_path, IMPRI_OIDC_ISSUER="https://id.example.com")
    assert result.returncode != 0
    assert "IMPRI_OIDC_ISSUER and IMPRI_OIDC_CLIENT_ID go together" in result.stderr


@pytest.mark.e2e  # a subprocess reads the settings afresh
def test_sso_only_without_sso_fails_loudly(tmp_path):
    result = settings_in(tmp_path, IMPRI_OIDC_SSO_ONLY="true")
    assert result.returncode != 0
    assert "IMPRI_OIDC_SSO_ONLY needs" in result.stderr


def test_an_identity_added_or_removed_by_hand_is_audited(rita):
    link = SsoIdentity.objects.create(user=rita.user, issuer=ISSUER, subject="0042")
    assert sso.sign_in(ISSUER, claims(sub="0042")) == rita.user
    link.delete()
    linked, unlinked = (
        AuditEvent.objects.get(event="user.sso_linked"),
        AuditEvent.objects.get(event="user.sso_unlinked"),
    )
    assert linked.data["how"] == "admin" and linked.actor_id == "system"
    assert unlinked.data == {
        "user": "rita",
        "user_ref": f"user:{rita.user.pk}",
        "issuer": ISSUER,
        "subject": "0042",
    }
