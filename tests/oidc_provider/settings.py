"""A small OpenID Connect provider (django-oauth-toolkit) that the SSO tests sign in through.

Everything it needs is in the directory ``OP_DIR`` (the test's temporary
directory): ``key.pem`` (an RSA key made at start), ``db.sqlite3`` and
``claims.json`` (per username: the extra claims, e.g. groups; re-read at each
token, so a test changes someone's groups between two sign-ins).
"""

import os
from pathlib import Path

OP_DIR = Path(os.environ["OP_DIR"])
OP_URL = os.environ["OP_URL"]

SECRET_KEY = "oidc-provider-for-tests-only"
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "oauth2_provider",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
]
ROOT_URLCONF = "tests.oidc_provider.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [Path(__file__).resolve().parent / "templates"],
        "OPTIONS": {"context_processors": ["django.template.context_processors.request"]},
    }
]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": OP_DIR / "db.sqlite3"}}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
USE_TZ = True
# Impri runs on the same host (another port): cookies do not tell ports apart.
SESSION_COOKIE_NAME = "op_session"
CSRF_COOKIE_NAME = "op_csrftoken"
LOGIN_URL = "/login/"

OAUTH2_PROVIDER = {
    "OIDC_ENABLED": True,
    "OIDC_RSA_PRIVATE_KEY": (OP_DIR / "key.pem").read_text()
    if (OP_DIR / "key.pem").exists()
    else "",
    "OIDC_ISS_ENDPOINT": OP_URL + "/o",
    "OAUTH2_VALIDATOR_CLASS": "tests.oidc_provider.validator.ClaimsFileValidator",
    "PKCE_REQUIRED": True,
    "SCOPES": {
        "openid": "OpenID Connect",
        "email": "E-mail",
        "profile": "Profile",
    },
}
