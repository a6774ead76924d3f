"""Settings for how reviewers sign in and where else they decide: single sign-on
(OpenID Connect), the second factor and step-up, and the Slack app.

Part of the settings (``impri/settings.py`` imports every name here); like the rest,
environment variables only, each listed in ``.env.example``.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from django.core.exceptions import ImproperlyConfigured

from impri.settings_env import env, envbool, envfloat, envint

# --- Single sign-on (OpenID Connect, docs/sso.md) ------------------------------------
# Off unless IMPRI_OIDC_ISSUER and IMPRI_OIDC_CLIENT_ID are set. The endpoints come from the
# issuer's /.well-known/openid-configuration (fetched once, at first use) unless given here.
IMPRI_OIDC_ISSUER = env("IMPRI_OIDC_ISSUER").strip().rstrip("/")
IMPRI_OIDC_CLIENT_ID = env("IMPRI_OIDC_CLIENT_ID").strip()
IMPRI_OIDC_CLIENT_SECRET = env("IMPRI_OIDC_CLIENT_SECRET")
IMPRI_OIDC_AUTHORIZATION_ENDPOINT = env("IMPRI_OIDC_AUTHORIZATION_ENDPOINT").strip()
IMPRI_OIDC_TOKEN_ENDPOINT = env("IMPRI_OIDC_TOKEN_ENDPOINT").strip()
IMPRI_OIDC_USERINFO_ENDPOINT = env("IMPRI_OIDC_USERINFO_ENDPOINT").strip()
IMPRI_OIDC_JWKS_URI = env("IMPRI_OIDC_JWKS_URI").strip()
IMPRI_OIDC_SCOPES = env("IMPRI_OIDC_SCOPES").strip()
# The claim listing the person's groups; each value names an Impri reviewer group. Unset: SSO
# never changes group memberships (admins assign them).
IMPRI_OIDC_GROUPS_CLAIM = env("IMPRI_OIDC_GROUPS_CLAIM").strip()
# Password login only for staff and superusers (break-glass); everyone else signs in with SSO.
IMPRI_OIDC_SSO_ONLY = envbool("IMPRI_OIDC_SSO_ONLY")
IMPRI_OIDC_TIMEOUT_S = envfloat("IMPRI_OIDC_TIMEOUT_S", minimum=0.1)
IMPRI_OIDC_ENABLED = bool(IMPRI_OIDC_ISSUER and IMPRI_OIDC_CLIENT_ID)
if bool(IMPRI_OIDC_ISSUER) != bool(IMPRI_OIDC_CLIENT_ID):
    raise ImproperlyConfigured("IMPRI_OIDC_ISSUER and IMPRI_OIDC_CLIENT_ID go together: set both")
if IMPRI_OIDC_ENABLED and urlsplit(IMPRI_OIDC_ISSUER).scheme not in ("http", "https"):
    raise ImproperlyConfigured("IMPRI_OIDC_ISSUER must be an http(s) URL")
if IMPRI_OIDC_SSO_ONLY and not IMPRI_OIDC_ENABLED:
    raise ImproperlyConfigured(
        "IMPRI_OIDC_SSO_ONLY needs IMPRI_OIDC_ISSUER and IMPRI_OIDC_CLIENT_ID (else nobody but "
        "staff could sign in)"
    )
# mozilla-django-oidc reads these names; the endpoints are resolved by identity.oidc.
OIDC_RP_CLIENT_ID = IMPRI_OIDC_CLIENT_ID
OIDC_RP_CLIENT_SECRET = IMPRI_OIDC_CLIENT_SECRET
OIDC_RP_SIGN_ALGO = "RS256"
OIDC_RP_SCOPES = IMPRI_OIDC_SCOPES
OIDC_USE_PKCE = True
OIDC_TIMEOUT = IMPRI_OIDC_TIMEOUT_S
OIDC_AUTHENTICATE_CLASS = "identity.oidc.SsoLoginView"
OIDC_CALLBACK_CLASS = "identity.oidc.SsoCallbackView"

# --- Second factor (docs/2fa.md) -------------------------------------------------
# Every password login must then pass a TOTP code; users without one enrol first.
IMPRI_REQUIRE_2FA = envbool("IMPRI_REQUIRE_2FA")
# Approving an amount (the action's, as approvals.money reads it) at or above
# this needs a second factor from the last 10 minutes; empty: no step-up.
IMPRI_STEP_UP_CENTS = envint("IMPRI_STEP_UP_CENTS", minimum=0) or None
OTP_TOTP_ISSUER = "Impri"
OTP_TOTP_THROTTLE_FACTOR = 1  # each wrong code doubles the wait before the next try
OTP_STATIC_THROTTLE_FACTOR = 1

# --- Slack app (docs/slack.md) ----------------------------------------------------
# The bot token posts Block Kit messages with Approve / Edit / Reject buttons to each group's
# channel (admin); unset: no app messages, and interactivity decides nothing.
IMPRI_SLACK_BOT_TOKEN = env("IMPRI_SLACK_BOT_TOKEN")
# Verifies POST /integrations/slack/interactivity; unset: every request there is refused (401).
IMPRI_SLACK_SIGNING_SECRET = env("IMPRI_SLACK_SIGNING_SECRET")
# Slack's Web API base URL (tests point it at a local receiver).
IMPRI_SLACK_API_URL = env("IMPRI_SLACK_API_URL") or "https://slack.com/api/"
# No approving (or editing) from Slack above this amount, in minor units; the inbox still can.
IMPRI_SLACK_MAX_APPROVE_CENTS = envint("IMPRI_SLACK_MAX_APPROVE_CENTS", minimum=0)
