"""Signing in with the company's identity provider (OpenID Connect), on mozilla-django-oidc.

mozilla-django-oidc runs the authorization-code flow (state, nonce, PKCE) and
checks the ID token's RS256 signature against the provider's JWKS; this module
adds what Impri needs around it:

- the provider's endpoints come from ``IMPRI_OIDC_ISSUER``'s discovery document,
  fetched at first use and kept (explicit ``IMPRI_OIDC_*_ENDPOINT`` settings win);
  nothing is fetched while Django builds the backend, so password logins (the
  break-glass path) keep working when the provider is away;
- the ID token must name our issuer and our client (the library checks neither);
- who the claims are, and their groups, is ``identity.sso.sign_in``;
- the ``amr`` claim (how the provider authenticated the person) is kept in the
  session as ``impri_amr``, a list of strings, for the second-factor check;
- a refusal comes back to the login page with its reason, never as a 500;
- ``IMPRI_OIDC_SSO_ONLY`` turns the password form away for everyone but staff.
"""

from __future__ import annotations

import logging
import threading

import httpx
import jwt
import requests
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.forms import AuthenticationForm
from django.core.exceptions import SuspiciousOperation, ValidationError
from django.http import Http404
from django.shortcuts import redirect
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView

from compat.mozilla_django_oidc import LazyEndpointRequestView, LazyEndpointsBackend
from identity import sso

logger = logging.getLogger(__name__)

SESSION_AMR = "impri_amr"
SESSION_METHOD = "impri_login_method"
SESSION_AUTH_TIME = "impri_auth_time"  # the IdP's auth_time: when its MFA happened (step-up)
ENDPOINTS = ("authorization_endpoint", "token_endpoint", "userinfo_endpoint", "jwks_uri")

_lock = threading.Lock()
_provider: dict | None = None


class ProviderUnreachable(Exception):
    pass


def provider() -> dict:
    """The provider's endpoints: explicit settings, else discovery (fetched once, then kept)."""
    global _provider
    if _provider is None:
        with _lock:
            if _provider is None:
                _provider = _discover()
    return _provider


def forget_provider() -> None:
    """Drop the kept endpoints (tests; a provider that moved)."""
    global _provider
    _provider = None


def _discover() -> dict:
    explicit = {
        "authorization_endpoint": settings.IMPRI_OIDC_AUTHORIZATION_ENDPOINT,
        "token_endpoint": settings.IMPRI_OIDC_TOKEN_ENDPOINT,
        "userinfo_endpoint": settings.IMPRI_OIDC_USERINFO_ENDPOINT,
        "jwks_uri": settings.IMPRI_OIDC_JWKS_URI,
    }
    if all(explicit.values()):
        return explicit
    issuer = settings.IMPRI_OIDC_ISSUER
    url = issuer + "/.well-known/openid-configuration"
    try:
        answer = httpx.get(url, timeout=settings.IMPRI_OIDC_TIMEOUT_S)
        answer.raise_for_status()
        document = answer.json()
    except (httpx.HTTPError, ValueError) as exc:
        raise ProviderUnreachable(f"discovery at {url} failed: {exc}") from None
    if not isinstance(document, dict) or str(document.get("issuer", "")).rstrip("/") != issuer:
        # OpenID Connect Discovery §4.3: the document must name the issuer it was fetched for.
        raise ProviderUnreachable(f"the discovery document at {url} names another issuer")
    found = {name: explicit[name] or str(document.get(name) or "") for name in ENDPOINTS}
    missing = [name for name, value in found.items() if not value]
    if missing:
        raise ProviderUnreachable(f"the discovery document at {url} has no {', '.join(missing)}")
    logger.info("OpenID Connect provider %s discovered", issuer)
    return found


def _refuse(request, reason: str, detail: object = "") -> None:
    """Remember why a sign-in failed, for the login page; the detail goes to the log only."""
    logger.warning("single sign-on refused: %s%s", reason, f" ({detail})" if detail else "")
    if request is not None:
        request.impri_sso_refused = reason


class ImpriOIDCBackend(LazyEndpointsBackend):
    # Django builds every backend for every login (password ones too): no network
    # there; the endpoints are asked for when a sign-in needs them.
    def endpoint(self, name: str) -> str:
        return provider()[name]

    def authenticate(self, request, **kwargs):
        # Only the callback passes a nonce; a password login never reaches the provider.
        if request is None or "nonce" not in kwargs or "password" in kwargs:
            return None
        try:
            return super().authenticate(request, **kwargs)
        except ProviderUnreachable as exc:
            _refuse(request, "the identity provider cannot be reached", exc)
        except (requests.RequestException, SuspiciousOperation, jwt.PyJWTError) as exc:
            _refuse(request, "the identity provider's answer was refused", exc)
        except (KeyError, TypeError, ValueError) as exc:
            # A malformed answer (a JWKS without kids, a token without an alg...): not a 500.
            _refuse(request, "the identity provider's answer is malformed", repr(exc))
        return None

    def get_user(self, user_id):
        # The library's returns deactivated users too: their sessions would outlive the switch.
        user = super().get_user(user_id)
        return user if user is not None and self.user_can_authenticate(user) else None

    def verify_token(self, token, **kwargs):
        """The library checks the signature, expiry and nonce; the issuer and audience too."""
        payload = super().verify_token(token, **kwargs)
        if str(payload.get("iss", "")).rstrip("/") != settings.IMPRI_OIDC_ISSUER:
            raise SuspiciousOperation("the ID token was issued by another provider")
        audience = payload.get("aud")
        audiences = audience if isinstance(audience, list) else [audience]
        if self.OIDC_RP_CLIENT_ID not in audiences:
            raise SuspiciousOperation("the ID token was issued for another client")
        if len(audiences) > 1 and payload.get("azp") != self.OIDC_RP_CLIENT_ID:
            raise SuspiciousOperation("the ID token was authorized for another client")
        if "exp" not in payload:
            raise SuspiciousOperation("the ID token has no expiry")
        return payload

    def get_or_create_user(self, access_token, id_token, payload):
        userinfo = self.get_userinfo(access_token, id_token, payload)
        if not isinstance(userinfo, dict) or userinfo.get("sub") != payload.get("sub"):
            # OpenID Connect Core §5.3.2: userinfo about someone else must not be used.
            raise SuspiciousOperation("the userinfo answer is about another subject")
        claims = {**payload, **userinfo}
        try:
            user = sso.sign_in(
                settings.IMPRI_OIDC_ISSUER, claims, groups_claim=settings.IMPRI_OIDC_GROUPS_CLAIM
            )
        except sso.SsoRefused as exc:
            _refuse(self.request, exc.message)
            return None
        amr = payload.get("amr")
        user.impri_amr = [str(a) for a in amr] if isinstance(amr, list) else []
        auth_time = payload.get("auth_time")
        valid = isinstance(auth_time, int | float) and not isinstance(auth_time, bool)
        user.impri_auth_time = auth_time if valid else None
        return user


class SsoLoginView(LazyEndpointRequestView):
    """``/accounts/oidc/authenticate/``: off to the provider (``?next=`` is kept)."""

    def get(self, request):
        if not settings.IMPRI_OIDC_ENABLED:
            raise Http404("single sign-on is not configured")
        try:
            endpoint = provider()["authorization_endpoint"]
        except ProviderUnreachable as exc:
            logger.warning("single sign-on unavailable: %s", exc)
            messages.error(
                request,
                "Single sign-on is unavailable: the identity provider "
                "cannot be reached. Try again in a moment.",
            )
            return redirect(settings.LOGIN_URL)
        return self.redirect_to_provider(request, endpoint)


class SsoCallbackView(OIDCAuthenticationCallbackView):
    """``/accounts/oidc/callback/``: the provider sends the person back here with a code."""

    def get(self, request):
        if not settings.IMPRI_OIDC_ENABLED:
            raise Http404("single sign-on is not configured")
        return super().get(request)

    def login_success(self):
        response = super().login_success()
        self.request.session[SESSION_AMR] = getattr(self.user, "impri_amr", [])
        self.request.session[SESSION_AUTH_TIME] = getattr(self.user, "impri_auth_time", None)
        self.request.session[SESSION_METHOD] = "oidc"
        return response

    def login_failure(self):
        reason = getattr(self.request, "impri_sso_refused", "")
        error = self.request.GET.get("error", "")[:60]
        if not reason and error:
            reason = f"the identity provider answered {error!r}"
        elif not reason:
            reason = "the sign-in did not complete"
        messages.error(self.request, f"Single sign-on failed: {reason}.")
        return redirect(settings.LOGIN_URL)


class LoginForm(AuthenticationForm):
    """The password form; with ``IMPRI_OIDC_SSO_ONLY`` only staff may use it (break-glass)."""

    def confirm_login_allowed(self, user):
        super().confirm_login_allowed(user)
        if settings.IMPRI_OIDC_SSO_ONLY and not (user.is_staff or user.is_superuser):
            raise ValidationError(
                "Password login is turned off for reviewers: use “Sign in with SSO”.",
                code="sso_only",
            )


def sso_context(request) -> dict:
    """Template context: whether to offer "Sign in with SSO"."""
    return {"sso_enabled": settings.IMPRI_OIDC_ENABLED}
