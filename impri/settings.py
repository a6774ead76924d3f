"""Impri settings: environment variables only, with safe embedded defaults.

Without any variable set, Impri runs on SQLite in ``IMPRI_DATA_DIR`` with the
in-memory channel layer. ``DATABASE_URL`` switches to PostgreSQL and
``REDIS_URL`` to the Redis channel layer (and Celery broker). Every variable is
listed in ``.env.example``.
"""

from __future__ import annotations

import os
import secrets
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit

from django.core.exceptions import ImproperlyConfigured

from impri import packages, schedule
from impri.logs import logging_config
from impri.settings_db import databases
from impri.settings_env import (
    env,
    envbool,
    envcidrs,
    envfloat,
    envint,
    envkey,
    envnetworks,
    envredis,
    private,
)

BASE_DIR = Path(__file__).resolve().parent.parent


# Before any app loads: `rules`, `audit`, ... are Impri's, not a namesake's (impri/packages.py).
packages.check()

DEBUG = envbool("IMPRI_DEBUG")
DATA_DIR = Path(env("IMPRI_DATA_DIR", str(Path.cwd() / "impri-data"))).resolve()


# Long-running commands that must share SECRET_KEY when several processes share PostgreSQL.
SHARED_KEY_ROLES = ("serve", "worker", "beat")


def _secret_key() -> str:
    """SECRET_KEY from the environment, else one generated once and kept in the data dir.

    There is no hard-coded fallback: a key baked into the code would let anyone
    forge sessions on every installation that forgot to set one.
    """
    key = env("SECRET_KEY")
    if key:
        return key
    if env("DATABASE_URL") and env("IMPRI_PROCESS_ROLE") in SHARED_KEY_ROLES:
        # Scaled mode: servers, workers and beat on other machines or directories would
        # each generate their own key, and a reviewer's session would end at every hop.
        raise ImproperlyConfigured(
            "SECRET_KEY is not set: with DATABASE_URL every impri serve, worker and beat "
            "must share one key. Set SECRET_KEY (or SECRET_KEY_FILE) to the same value "
            "everywhere, e.g. from: python3 -c 'import secrets; print(secrets.token_urlsafe(50))'"
        )
    path = DATA_DIR / "secret_key"
    try:
        private(DATA_DIR, 0o700, directory=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path.read_text().strip()
    except OSError as exc:
        raise ImproperlyConfigured(
            f"SECRET_KEY is not set and {path} cannot be written ({exc}); set SECRET_KEY"
        ) from exc
    key = secrets.token_urlsafe(50)
    with os.fdopen(fd, "w") as fh:
        fh.write(key)
    return key


SECRET_KEY = _secret_key()

# Unset, they follow IMPRI_BASE_URL: its host is served and its origin may post forms.
_base = urlsplit(env("IMPRI_BASE_URL"))
_hosts = "localhost,127.0.0.1,[::1]" + (f",{_base.hostname}" if _base.hostname else "")
ALLOWED_HOSTS = [h.strip() for h in (env("ALLOWED_HOSTS") or _hosts).split(",") if h.strip()]
_origins = f"{_base.scheme}://{_base.netloc}" if _base.hostname else ""
CSRF_TRUSTED_ORIGINS = [
    o.strip() for o in (env("CSRF_TRUSTED_ORIGINS") or _origins).split(",") if o.strip()
]

INSTALLED_APPS = [
    "daphne",
    "impri.apps.ImpriAdminConfig",  # django.contrib.admin with Impri's site
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "django_htmx",
    # Only for its static files: /api/v1/docs loads Swagger UI from this server, not a CDN.
    "ninja",
    "axes",
    "impri.apps.ImpriConfig",  # the project-wide commands: serve, worker, beat, mcp, waitdb, backup
    "approvals",
    "agent_doors",
    "waiting",
    "delivery",
    "identity",
    "rules",
    "audit",
    "inbox",
    "gateway",
    "slackapp",
    "ledger",
    "django_otp",
    "django_otp.plugins.otp_totp",
    "django_otp.plugins.otp_static",
    "twofactor",
    "webpush",
    "ops",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # /api/ only: JSON for every error, no-store, DENY framing (also on the refusals below).
    "impri.middleware.ApiAnswersMiddleware",
    "impri.middleware.BodySizeLimitMiddleware",
    "plumbing.middleware.RefuseNulMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "impri.middleware.CommonMiddleware",  # Django's, the probes answering any Host
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django_otp.middleware.OTPMiddleware",  # request.user.otp_device: the device verified
    "twofactor.middleware.SecondFactorMiddleware",  # a password alone reaches only the code page
    "audit.identity.ActorMiddleware",  # who made an admin change, for the audit log
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "inbox.middleware.ContentSecurityPolicyMiddleware",
    # Sync-only, and low on purpose: every middleware above it then runs in the request's
    # thread with the (sync) view, one hop in all. With it near the top, Django runs each
    # classic middleware below it in async mode, two sync_to_async hops apiece (docs:
    # "Asynchronous support"; docs/benchmarks.md, "Stock parts").
    "whitenoise.middleware.WhiteNoiseMiddleware",
    # Last, as django-axes requires: it answers a locked-out login.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "impri.urls"
ASGI_APPLICATION = "impri.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        # Installed: impri/templates (pyproject maps the folder there); a source tree: ./templates.
        "DIRS": [
            next(
                d
                for d in (Path(__file__).resolve().parent / "templates", BASE_DIR / "templates")
                if d.is_dir()
            )
        ],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "identity.oidc.sso_context",
            ],
        },
    },
]

# --- Database ---------------------------------------------------------------
# Which command this process runs (set by the ``impri`` console script): the
# connection pool is sized per role so that the whole deployment stays within
# PostgreSQL's max_connections (docs/ARCHITECTURE.md: processes × pool).
IMPRI_PROCESS_ROLE = env("IMPRI_PROCESS_ROLE")
if IMPRI_PROCESS_ROLE in ("worker", "mcp", "command"):
    # daphne's app only installs Twisted's reactor for `runserver` (`impri serve` runs
    # daphne's server itself): a worker, the stdio MCP server and a one-shot command
    # (`impri createagent`: any but serve, worker, beat, mcp, runserver and check) load no
    # Twisted, half a second of every start. Without a role (manage.py, the test suite) it
    # is installed.
    INSTALLED_APPS = [app for app in INSTALLED_APPS if app != "daphne"]
# Impri's system-check warnings about the deployment: said when serve, worker or beat
# starts and by `impri check`; a one-shot command (`impri migrate`) still stops on a
# check's error but keeps them quiet, through Django's own switch.
IMPRI_DEPLOYMENT_WARNINGS = ["impri.W001", "impri.W002", "impri.W003", "impri.W004"]
if IMPRI_PROCESS_ROLE == "command":
    SILENCED_SYSTEM_CHECKS = IMPRI_DEPLOYMENT_WARNINGS
if IMPRI_PROCESS_ROLE == "worker":
    # ninja's app only serves Swagger UI's static files: the worker serves no page (a
    # command keeps it, `impri collectstatic` copies them); docs/benchmarks.md, "idle footprint".
    INSTALLED_APPS = [app for app in INSTALLED_APPS if app != "ninja"]
# serve: its API requests in flight (each on its own thread, as Django's handler runs them)
# and the async side's 8 + 4 database calls (plumbing.database).
_POOL_BY_ROLE = {"serve": "24", "mcp": "2", "worker": "2", "beat": "1"}
IMPRI_DB_POOL_SIZE = envint("IMPRI_DB_POOL_SIZE", _POOL_BY_ROLE.get(IMPRI_PROCESS_ROLE, "0"))
IMPRI_DB_POOL_TIMEOUT_S = envfloat("IMPRI_DB_POOL_TIMEOUT_S", minimum=0.1)
# `impri waitdb` (the image's start script) gives up on the database and Redis after this long.
IMPRI_DB_WAIT_S = envfloat("IMPRI_DB_WAIT_S", minimum=0)
# `impri serve`: a full garbage collection after this many young-generation passes
# (CPython's default is 10; see the serve command for why it is higher).
IMPRI_GC_FULL_EVERY = envint("IMPRI_GC_FULL_EVERY", minimum=1)

DATABASE_URL = env("DATABASE_URL")
DATABASES = databases(DATABASE_URL, DATA_DIR, IMPRI_DB_POOL_SIZE, IMPRI_DB_POOL_TIMEOUT_S)

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Channels -----------------------------------------------------------------
REDIS_URL = envredis("REDIS_URL")
# Put before every key Impri writes in Redis (channel layer, cache, Celery's queues), so that
# several deployments (or a test run's parallel workers) can share one Redis database.
IMPRI_REDIS_PREFIX = env("IMPRI_REDIS_PREFIX")
IMPRI_LAYER_CAPACITY = envint("IMPRI_LAYER_CAPACITY", minimum=100)
if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            # One channel per process receives every waiter's wake-ups (the hub).
            # redis-py's default 5 s socket timeout races channels_redis's 5 s
            # blocking receive (a spurious "Timeout reading" every 5 s): give the
            # read more room, and connecting little.
            "CONFIG": {
                "hosts": [
                    {"address": REDIS_URL, "socket_timeout": 15, "socket_connect_timeout": 2}
                ],
                "capacity": IMPRI_LAYER_CAPACITY,
                "prefix": IMPRI_REDIS_PREFIX + "asgi",
            },
        },
        # The waiters' wake-ups (approvals.events.WAKE_LAYER, waiting.hub): hints, so Redis
        # pub/sub (no queue kept in Redis, nothing to clean up); a lost one costs a re-read.
        "waiting": {
            "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
            "CONFIG": {
                "hosts": [
                    {"address": REDIS_URL, "socket_timeout": 15, "socket_connect_timeout": 2}
                ],
                "prefix": IMPRI_REDIS_PREFIX + "asgi",
            },
        },
    }
    _REDIS_CACHE = {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": IMPRI_REDIS_PREFIX + "impri",
        # The rate limiter's counts and the keys' generation: fail fast when Redis is away.
        "OPTIONS": {"socket_connect_timeout": 0.5, "socket_timeout": 0.5},
    }
    # "keys": the generation of the key check's cache (identity.keys), shared by every process.
    CACHES = {"default": _REDIS_CACHE, "keys": _REDIS_CACHE}
else:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels.layers.InMemoryChannelLayer",
            "CONFIG": {"capacity": IMPRI_LAYER_CAPACITY},
        },
        "waiting": {
            "BACKEND": "channels.layers.InMemoryChannelLayer",
            "CONFIG": {"capacity": IMPRI_LAYER_CAPACITY},
        },
    }
    CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
        # The generation of the key check's cache (identity.keys): a file, so that a key
        # revoked by the CLI is refused at once by the server and a stdio MCP server too.
        "keys": {
            "BACKEND": "django.core.cache.backends.filebased.FileBasedCache",
            "LOCATION": DATA_DIR / "cache" / "keys",
        },
    }

# --- Auth, sessions, security ---------------------------------------------------
# Messages live in the session (server-side), not in a signed-but-readable cookie:
# the admin shows new keys and webhook secrets once through them.
MESSAGE_STORAGE = "django.contrib.messages.storage.session.SessionStorage"
LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/inbox/"
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_SAMESITE = "Lax"
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"
# HTTPS is decided by one variable: an https:// IMPRI_BASE_URL. Then Impri sits
# behind a TLS-terminating proxy, so it trusts X-Forwarded-Proto, marks cookies
# Secure and sends HSTS. IMPRI_SECURE_COOKIES and IMPRI_BEHIND_PROXY (older
# names) are aliases: either set to true means the same.
IMPRI_HTTPS = (
    env("IMPRI_BASE_URL").lower().startswith("https://")
    or envbool("IMPRI_SECURE_COOKIES")
    or envbool("IMPRI_BEHIND_PROXY")
)
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https") if IMPRI_HTTPS else None
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = IMPRI_HTTPS
SECURE_HSTS_SECONDS = 31_536_000 if IMPRI_HTTPS else 0
SECURE_REFERRER_POLICY = "same-origin"

# Proxies whose X-Forwarded-For is believed (plumbing.addresses.client_address); default none.
IMPRI_TRUSTED_PROXIES = envnetworks("IMPRI_TRUSTED_PROXIES")

# Password guessing: django-axes locks a username *from one address* after this
# many failures, for this long (a lockout by username alone would let anyone
# lock a reviewer out; by address alone, a botnet guesses freely).
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = envint("IMPRI_LOGIN_FAILURE_LIMIT", minimum=1)
AXES_COOLOFF_TIME = timedelta(seconds=envint("IMPRI_LOGIN_LOCKOUT_S", minimum=1))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_CLIENT_IP_CALLABLE = "plumbing.addresses.client_address"
AXES_LOCKOUT_CALLABLE = "impri.security.lockout_response"
AXES_DISABLE_ACCESS_LOG = True  # logins are in the audit log already
AXES_VERBOSE = False
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {
        "NAME": "django.contrib.auth.password_validation.MinimumLengthValidator",
        "OPTIONS": {"min_length": 12},
    },
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

# --- Single sign-on, second factor, Slack app: impri/settings_reviewers.py ------
from impri.settings_reviewers import *  # noqa: E402, F403
from impri.settings_reviewers import IMPRI_OIDC_ENABLED  # noqa: E402

if IMPRI_OIDC_ENABLED:
    AUTHENTICATION_BACKENDS.append("identity.oidc.ImpriOIDCBackend")
OIDC_REDIRECT_REQUIRE_HTTPS = IMPRI_HTTPS

# --- Static files -------------------------------------------------------------
STATIC_URL = "/static/"
# Static files ship inside the apps and are served from there by whitenoise's
# finders, so `pip install` + `impri serve` needs no collectstatic step.
STATIC_ROOT = env("IMPRI_STATIC_ROOT") or None
WHITENOISE_USE_FINDERS = True

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

# --- Impri ---------------------------------------------------------------------
IMPRI_BASE_URL = env("IMPRI_BASE_URL").rstrip("/")
# Where `impri serve` listens (its --host/--port defaults), and the links' origin when
# IMPRI_BASE_URL is unset and no request names one (approvals/site.py).
IMPRI_HOST = env("IMPRI_HOST")
IMPRI_PORT = envint("IMPRI_PORT", minimum=1)
# `impri serve`: connections the kernel queues for the server before it accepts them (Twisted's
# default is 50; Linux caps it at net.core.somaxconn). A burst of agents connecting at once
# beyond the queue waits for SYN retries (1 s, 3 s, ...) or fails.
IMPRI_LISTEN_BACKLOG = envint("IMPRI_LISTEN_BACKLOG", minimum=1)
IMPRI_MAX_BODY_BYTES = envint("IMPRI_MAX_BODY_BYTES", minimum=1024)
IMPRI_DEFAULT_EXPIRES_S = envint("IMPRI_DEFAULT_EXPIRES_S", minimum=1)
IMPRI_MAX_EXPIRES_S = envint("IMPRI_MAX_EXPIRES_S", minimum=1)
IMPRI_MAX_AWAIT_S = envint("IMPRI_MAX_AWAIT_S", minimum=1)
IMPRI_AWAIT_REREAD_S = envfloat("IMPRI_AWAIT_REREAD_S", minimum=0.05)
IMPRI_DEFAULT_GROUP = env("IMPRI_DEFAULT_GROUP")
IMPRI_RATE_LIMIT_PER_MIN = envint("IMPRI_RATE_LIMIT_PER_MIN", minimum=0)
# Signs audit checkpoints (impri audit checkpoint); unset: SECRET_KEY. Keep a copy off this server.
IMPRI_AUDIT_CHECKPOINT_KEY = env("IMPRI_AUDIT_CHECKPOINT_KEY")
IMPRI_MAX_TITLE_CHARS = 200
# Grants (approvals/grants.py): an Ed25519 key as PEM text or a file; unset: one is
# generated into <data dir>/grant-keys/. Scaled deployments share one key.
IMPRI_GRANT_SIGNING_KEY = envkey("IMPRI_GRANT_SIGNING_KEY")
IMPRI_GRANT_SIGNING_KEY_FILE = env("IMPRI_GRANT_SIGNING_KEY_FILE")
# An approval's grant is valid for this long after the decision.
IMPRI_GRANT_TTL_S = envint("IMPRI_GRANT_TTL_S", minimum=1)
# `impri grantkey retire` refuses a key a process published or signed with this recently.
IMPRI_KEY_LIVE_S = envint("IMPRI_KEY_LIVE_S", minimum=1)
# MCP waits: without a progress token most clients give up at 60 s, so stop
# before that; with one, send a progress notification this often.
IMPRI_MCP_AWAIT_CAP_S = envfloat("IMPRI_MCP_AWAIT_CAP_S", minimum=1)
IMPRI_MCP_PROGRESS_EVERY_S = envfloat("IMPRI_MCP_PROGRESS_EVERY_S", minimum=0.1)

# A kind that declares no money moves an unknown amount, held over every threshold
# (strict); detect: the detector reads it, as before issue 39 (a migration period only).
IMPRI_UNDECLARED_KINDS = env("IMPRI_UNDECLARED_KINDS").strip().lower()
if IMPRI_UNDECLARED_KINDS not in ("strict", "detect"):
    raise ImproperlyConfigured(
        f"IMPRI_UNDECLARED_KINDS must be strict or detect, not {IMPRI_UNDECLARED_KINDS!r}"
    )

# Bearer token Prometheus scrapes /metrics with; unset: no metrics endpoint (404).
IMPRI_METRICS_TOKEN = env("IMPRI_METRICS_TOKEN")

# Django refuses to parse bodies past this; the middleware answers 413 first.
DATA_UPLOAD_MAX_MEMORY_SIZE = IMPRI_MAX_BODY_BYTES

# --- Background work (Celery) ------------------------------------------------------
# Scaled: Redis is the broker, `impri worker` and `impri beat` run the tasks.
# Embedded: tasks run eagerly in-process and `impri serve` runs the periodic
# sweeps itself (eager mode cannot schedule anything).
CELERY_BROKER_URL = REDIS_URL or "memory://"
CELERY_TASK_ALWAYS_EAGER = not REDIS_URL
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# A request's after-commit nudge must never hang on a missing broker: no
# publish retries, short socket timeouts (beat picks the work up anyway).
CELERY_TASK_PUBLISH_RETRY = False
CELERY_BROKER_CONNECTION_TIMEOUT = 1
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "socket_timeout": 2,
    "socket_connect_timeout": 1,
    **({"global_keyprefix": IMPRI_REDIS_PREFIX} if IMPRI_REDIS_PREFIX else {}),
}
CELERY_TIMEZONE = "UTC"
# How often expiry, deliveries and notifications are swept (seconds).
IMPRI_TICK_S = envfloat("IMPRI_TICK_S", minimum=0.1)
# How often escalations, reminders and stale approvals are swept (seconds).
IMPRI_SLOW_TICK_S = envfloat("IMPRI_SLOW_TICK_S", minimum=0.1)
# An approved action with no reported result after this long is flagged and notified.
IMPRI_REPORT_DEADLINE_S = envint("IMPRI_REPORT_DEADLINE_S", minimum=1)
# Webhook POSTs give up after this many seconds per attempt (then retry with backoff).
IMPRI_WEBHOOK_TIMEOUT_S = envfloat("IMPRI_WEBHOOK_TIMEOUT_S", minimum=0.1)
# How long a worker owns an outbox row it is sending; a killed worker's rows go again after this.
IMPRI_WEBHOOK_LEASE_S = envfloat("IMPRI_WEBHOOK_LEASE_S", minimum=1)
# Deliveries run concurrently: threads per lane (webhooks, notifications) per process, and at
# most this many in flight per destination (and per agent) so a dead receiver holds few threads.
IMPRI_DELIVERY_CONCURRENCY = envint("IMPRI_DELIVERY_CONCURRENCY", minimum=1)
IMPRI_DELIVERY_PER_DESTINATION = envint("IMPRI_DELIVERY_PER_DESTINATION", minimum=1)


# Internal networks agent callbacks and admin-entered webhook URLs may reach (comma-separated
# CIDRs); every other loopback, private, link-local, CGNAT or unique-local address is refused.
IMPRI_CALLBACK_ALLOWED_NETWORKS = envcidrs("IMPRI_CALLBACK_ALLOWED_NETWORKS")
# Web Push to reviewers' phones (webpush/): the VAPID key (PEM, or _FILE; empty: generated
# into the data dir) and the contact push services see (empty: the https base URL).
IMPRI_VAPID_PRIVATE_KEY = env("IMPRI_VAPID_PRIVATE_KEY")
IMPRI_VAPID_SUBJECT = env("IMPRI_VAPID_SUBJECT")
# Delivered (or given-up) webhooks with their attempts, notifications and budget
# windows older than this many days are pruned every hour; 0 keeps them. Never the audit log.
IMPRI_RETENTION_DAYS = envint("IMPRI_RETENTION_DAYS", minimum=0)
# How often the audit chain is verified in the background, from the last verified run
# (seconds); 0: only on demand.
IMPRI_AUDIT_VERIFY_EVERY_S = envint("IMPRI_AUDIT_VERIFY_EVERY_S", minimum=0)
# Reconciliation (ledger/): Stripe's webhook signing secrets (comma-separated: the old and
# the new one while rotating), and the hours after an executed report with no movement
# before the action reads as unsettled.
IMPRI_STRIPE_WEBHOOK_SECRET = [
    part.strip() for part in env("IMPRI_STRIPE_WEBHOOK_SECRET").split(",") if part.strip()
]
IMPRI_LEDGER_SETTLE_H = envfloat("IMPRI_LEDGER_SETTLE_H", minimum=0)
# Where ledger.exception webhooks go besides the action's callback_url, and their secret.
IMPRI_LEDGER_WEBHOOK_URL = env("IMPRI_LEDGER_WEBHOOK_URL").strip()
IMPRI_LEDGER_WEBHOOK_SECRET = env("IMPRI_LEDGER_WEBHOOK_SECRET").strip()
IMPRI_HOUSEKEEPING_EVERY_S = 3600
# Beat's schedule is the table of periodic jobs the embedded ticker runs too (impri/schedule.py).
CELERY_BEAT_SCHEDULE = schedule.beat(globals())

# --- Email (notifications) ------------------------------------------------------
# Without EMAIL_HOST, mail is written to the log instead of being sent.
EMAIL_HOST = env("EMAIL_HOST")
EMAIL_BACKEND = (
    "django.core.mail.backends.smtp.EmailBackend"
    if EMAIL_HOST
    else "django.core.mail.backends.console.EmailBackend"
)
EMAIL_PORT = envint("EMAIL_PORT", minimum=1)
EMAIL_HOST_USER = env("EMAIL_HOST_USER")
EMAIL_HOST_PASSWORD = env("EMAIL_HOST_PASSWORD")
EMAIL_USE_TLS = envbool("EMAIL_USE_TLS")
DEFAULT_FROM_EMAIL = env("DEFAULT_FROM_EMAIL")
EMAIL_TIMEOUT = envint("EMAIL_TIMEOUT", minimum=1)

# plain: "time level logger message"; json: one JSON object per line (impri/logs.py).
IMPRI_LOG_FORMAT = env("IMPRI_LOG_FORMAT").strip().lower() or "plain"
if IMPRI_LOG_FORMAT not in ("plain", "json"):
    raise ImproperlyConfigured(f"IMPRI_LOG_FORMAT must be plain or json, not {IMPRI_LOG_FORMAT!r}")
LOGGING = logging_config(IMPRI_LOG_FORMAT, env("IMPRI_LOG_LEVEL"))

# --- Inbox ----------------------------------------------------------------------
# No 'unsafe-inline' and no 'unsafe-eval' for scripts or styles: every script is
# a static file, every style is in inbox.css. 'self' covers ws(s) to this host.
IMPRI_CSP = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "font-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    ]
)
# The admin's own templates use inline style attributes, never inline script.
IMPRI_ADMIN_CSP = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self' 'unsafe-inline'",
        "img-src 'self' data:",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    ]
)
# The API docs bring their own page (they load Swagger UI).
IMPRI_CSP_EXEMPT_PREFIXES = ("/api/",)
# No reviewer page needs a camera, a microphone, a location or a payment sheet.
IMPRI_PERMISSIONS_POLICY = (
    "camera=(), microphone=(), geolocation=(), payment=(), usb=(), "
    "interest-cohort=(), browsing-topics=()"
)
