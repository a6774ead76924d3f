"""mozilla-django-oidc's constructors Impri skips, and the attributes its flow reads.

The library's ``OIDCAuthenticationBackend.__init__`` reads the provider's endpoints
from settings (``OIDC_OP_*``) and refuses to build without them, and Django builds
every authentication backend for every login, password ones included; its
``OIDCAuthenticationRequestView.__init__`` does the same for the authorization
endpoint. Impri learns the endpoints from the issuer's discovery document at the
first sign-in (``identity.oidc.provider``), so that nothing is fetched while Django
builds a backend and password logins (the break-glass path) keep working when the
provider is away. So:

- ``LazyEndpointsBackend.__init__`` sets only the client's settings, without the
  library's ``__init__``; the endpoints the library's methods read as
  ``self.OIDC_OP_TOKEN_ENDPOINT``, ``..._USER_ENDPOINT`` and ``..._JWKS_ENDPOINT`` are
  properties that ask ``endpoint(name)`` (discovery's names) when a sign-in needs them;
- ``LazyEndpointRequestView.__init__`` is ``View.__init__`` only, and
  ``redirect_to_provider`` sets ``self.OIDC_OP_AUTH_ENDPOINT``, which the library's
  ``get`` reads, just before calling it.

Reason: logins while the provider is away (behaviour, not speed).

Relies on: the library's methods reading ``self.OIDC_OP_*_ENDPOINT`` when they run
(``get_token``, ``get_userinfo``, ``retrieve_matching_jwk``) and its view's ``get`` reading
``self.OIDC_OP_AUTH_ENDPOINT``, with nothing else of the skipped constructors needed later.
``tests/project/test_compat.py`` builds the backend with no endpoint configured, runs the
library's own ``get_token`` and ``get_userinfo`` against a local server named only when
they ask, and follows the view's redirect to an endpoint given at request time.

Exit plan: when mozilla-django-oidc reads the endpoints lazily itself (or takes a
discovery URL: mozilla/mozilla-django-oidc's issues on OIDC discovery), set them as its
settings or give it the issuer, and delete this module; if it never does, make the code
exchange in our own callback view (three requests) and drop the library.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth import get_user_model
from django.views.generic import View
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.views import OIDCAuthenticationRequestView


class LazyEndpointsBackend(OIDCAuthenticationBackend):
    """The library's backend, built without the provider; subclasses say where it is."""

    def __init__(self, *args, **kwargs):
        self.OIDC_RP_CLIENT_ID = settings.OIDC_RP_CLIENT_ID
        self.OIDC_RP_CLIENT_SECRET = settings.OIDC_RP_CLIENT_SECRET
        self.OIDC_RP_SIGN_ALGO = settings.OIDC_RP_SIGN_ALGO
        self.OIDC_RP_IDP_SIGN_KEY = None
        self.UserModel = get_user_model()

    def endpoint(self, name: str) -> str:
        """The provider's ``token_endpoint``, ``userinfo_endpoint`` or ``jwks_uri``."""
        raise NotImplementedError

    @property
    def OIDC_OP_TOKEN_ENDPOINT(self) -> str:  # noqa: N802  (the library's name)
        return self.endpoint("token_endpoint")

    @property
    def OIDC_OP_USER_ENDPOINT(self) -> str:  # noqa: N802
        return self.endpoint("userinfo_endpoint")

    @property
    def OIDC_OP_JWKS_ENDPOINT(self) -> str:  # noqa: N802
        return self.endpoint("jwks_uri")


class LazyEndpointRequestView(OIDCAuthenticationRequestView):
    """The library's redirect to the provider, built without the provider's endpoint."""

    def __init__(self, **kwargs):
        View.__init__(self, **kwargs)
        self.OIDC_RP_CLIENT_ID = settings.OIDC_RP_CLIENT_ID

    def redirect_to_provider(self, request, authorization_endpoint: str):
        """The library's ``get``: off to ``authorization_endpoint`` with state, nonce and PKCE."""
        self.OIDC_OP_AUTH_ENDPOINT = authorization_endpoint
        return super().get(request)
