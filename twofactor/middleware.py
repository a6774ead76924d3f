"""After a password, a session with a second factor to pass reaches only the code page.

The password login itself is untouched (``/accounts/login/`` redirects on
success as before); this middleware then sends the session to the code page,
or to enrolment when ``IMPRI_REQUIRE_2FA`` is on and the user has no
authenticator yet, until it is verified. Sessions where the identity provider
asserted MFA (``impri_amr``) pass, and get their step-up clock started.
"""

from __future__ import annotations

from urllib.parse import urlencode

from asgiref.sync import sync_to_async
from django.http import HttpResponse
from django.shortcuts import redirect
from django.urls import reverse

from plumbing.middleware import DualModeMiddleware

from . import services

# Open to a session that has not passed its second factor yet.
OPEN_PREFIXES = (
    "/accounts/",  # login, logout, the code and enrolment pages, an SSO callback
    "/oidc/",
    "/static/",
    "/api/",
    "/mcp",
    "/ws/",
    "/healthz",
    "/readyz",
    "/metrics",
    "/.well-known/",
    "/integrations/",
    # The installable inbox's files: no reviewer data, fetched by the browser on its own.
    "/inbox/manifest.webmanifest",
    "/inbox/sw.js",
    "/inbox/offline",
)


class SecondFactorMiddleware(DualModeMiddleware):
    def __call__(self, request):
        if self.is_async:
            return self._acall_2fa(request)
        return self._check(request) or self.get_response(request)

    async def _acall_2fa(self, request):
        early = None
        if not request.path.startswith(OPEN_PREFIXES):
            early = await sync_to_async(self._check)(request)
        return early or await self.get_response(request)

    def _check(self, request):
        if request.path.startswith(OPEN_PREFIXES) or not hasattr(request, "session"):
            return None
        user = request.user
        if not user.is_authenticated:
            return None
        if (
            services.idp_asserted_mfa(request.session)
            and services.verified_at(request.session) is None
        ):
            # The provider's MFA counts for step-up from when it happened (auth_time), not
            # from now: a silent re-login on a provider session hours old is no fresh factor.
            authenticated = services.idp_auth_time(request.session)
            if authenticated is not None:
                services.stamp(request.session, authenticated)
        step = services.required_step(request)
        if step is None:
            return None
        name = "twofactor:verify" if step == "verify" else "twofactor:manage"
        target = f"{reverse(name)}?{urlencode({'next': request.get_full_path()})}"
        if request.headers.get("HX-Request"):
            response = HttpResponse(status=204)
            response["HX-Redirect"] = target
            return response
        return redirect(target)
