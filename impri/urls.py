from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from agent_doors.api import api
from identity.oidc import LoginForm
from ledger import api as ledger_api
from ledger import views as ledger_views
from ops import health, metrics

# Reconciliation (ledger/, above the adapters) joins the API here: /api/v1/ledger/...
api.add_router("/ledger", ledger_api.router)

sign_out = auth_views.LogoutView.as_view(next_page="login")

urlpatterns = [
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path(".well-known/jwks.json", health.jwks, name="jwks"),
    path("metrics", metrics.metrics_view, name="metrics"),
    path("api/v1/", api.urls),
    path(
        "accounts/login/", auth_views.LoginView.as_view(authentication_form=LoginForm), name="login"
    ),
    # Single sign-on (identity/oidc.py): authenticate/ and callback/; 404 unless configured.
    path("accounts/oidc/", include("mozilla_django_oidc.urls")),
    # Both log-out buttons (the inbox's, admin's) land on the sign-in page, not admin's goodbye.
    path("accounts/logout/", sign_out, name="logout"),
    path("admin/logout/", sign_out),
    path("accounts/2fa/", include("twofactor.urls")),
    path("admin/", admin.site.urls),
    path("integrations/slack/", include("slackapp.urls")),
    path("integrations/stripe/events", ledger_views.stripe_webhook, name="stripe_events"),
    path("inbox/reconciliation/", include("ledger.urls")),
    path("", include("inbox.urls")),
]

handler400 = "impri.errors.bad_request"
handler404 = "impri.errors.not_found"
handler500 = "impri.errors.server_error"
