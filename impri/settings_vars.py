"""Every environment variable Impri reads: one list, the source of docs/configuration.md.

Each entry names the variable, the default the settings read when it is unset (as it
would be written in ``.env.example``; empty where the default is computed, e.g. from the
data directory or the process's role), the default as the documentation states it, what
it means, and which processes read it (``all``: every ``impri`` command). The readers in
``impri/settings_env.py`` take their default from here when a call gives none, and
refuse a name that is not listed; ``tests/project/test_configuration.py`` fails when the code
reads a variable that is not listed here, or one listed here is never read, and when
docs/configuration.md is not what :func:`markdown` makes of this list
(``python -m impri.settings_vars > docs/configuration.md`` writes it).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Var:
    name: str
    default: str  # what the settings read when unset; "" where it is computed
    shown: str  # the default as the documentation states it
    meaning: str
    roles: str


# One variable a line: name, default read, default shown, meaning, read by.
# fmt: off
VARIABLES: list[Var] = [
    Var("IMPRI_DATA_DIR", "", "`./impri-data`", "SQLite database and the generated secret key", "all"),
    Var("SECRET_KEY", "", "generated once into `IMPRI_DATA_DIR/secret_key`; **required** with `DATABASE_URL` for `serve`, `worker` and `beat`", "signs sessions and CSRF tokens; never hard-coded; every process of a scaled deployment must share it", "all"),
    Var("ALLOWED_HOSTS", "", "`localhost,127.0.0.1,[::1]` and the host of `IMPRI_BASE_URL`", "host names served (and accepted by MCP); `/healthz` and `/readyz` answer whatever the host", "serve"),
    Var("CSRF_TRUSTED_ORIGINS", "", "the origin of `IMPRI_BASE_URL`", "e.g. `https://impri.example.com` behind a proxy", "serve"),
    Var("DATABASE_URL", "", "empty (SQLite)", "e.g. `postgres://impri:secret@db:5432/impri`", "all"),
    Var("REDIS_URL", "", "empty (in-memory layer)", "e.g. `redis://redis:6379/0`: channel layer across processes, cache", "all"),
    Var("IMPRI_REDIS_PREFIX", "", "empty", "put before every key Impri writes in `REDIS_URL` (channel layer, cache, Celery's queues), e.g. `impri-eu:`, so that several deployments share one Redis database; every process of a deployment must share it", "all"),
    Var("IMPRI_API_KEY", "", "empty", "the agent key `impri mcp` (stdio) acts with", "mcp"),
    Var("IMPRI_BASE_URL", "", "the request's host", "public base for `inbox_url` links; `https://…` switches on HTTPS mode: `Secure` cookies, HSTS (one year), and trust in `X-Forwarded-Proto` from the TLS-terminating proxy", "all"),
    Var("IMPRI_HOST", "127.0.0.1", "`127.0.0.1`", "where `impri serve` listens; also the origin of links when `IMPRI_BASE_URL` is unset and no request names one", "serve (links: all)"),
    Var("IMPRI_PORT", "8000", "`8000`", "where `impri serve` listens; also the origin of links when `IMPRI_BASE_URL` is unset and no request names one", "serve (links: all)"),
    Var("IMPRI_LISTEN_BACKLOG", "1024", "`1024`", "connections the kernel queues for `impri serve` before it accepts them (Twisted's default is 50; capped by `net.core.somaxconn`)", "serve"),
    Var("IMPRI_MAX_BODY_BYTES", "1048576", "`1048576`", "larger request bodies get 413", "serve"),
    Var("IMPRI_DEFAULT_EXPIRES_S", "86400", "`86400`", "expiry of an action pushed without `expires_in_s`", "serve, mcp"),
    Var("IMPRI_MAX_EXPIRES_S", "2592000", "`2592000`", "the largest `expires_in_s` accepted", "serve, mcp"),
    Var("IMPRI_MAX_AWAIT_S", "300", "`300`", "cap on one `await_decision` call", "serve, mcp"),
    Var("IMPRI_AWAIT_REREAD_S", "2", "`2`", "the waiter hub's safety net: one batched query this often re-reads every open wait of the process", "serve, mcp"),
    Var("IMPRI_EVENT_LOOP", "auto", "`auto`", "the event loop of `impri serve`: `auto` (uvloop, installed with Impri on Linux and macOS, else asyncio's), `uvloop` (refuse to start without it) or `asyncio`", "serve"),
    Var("IMPRI_GC_FULL_EVERY", "1000", "`1000`", "`impri serve` runs a full garbage collection after this many young-generation passes (CPython's default is 10): rarer pauses with thousands of waits open", "serve"),
    Var("IMPRI_DB_POOL_SIZE", "", "by command: `serve` 24, `mcp` 2, `worker` 2, `beat` 1, others 0", "PostgreSQL connections pooled per process (`0`: no pool); keep processes × pool under `max_connections`", "all"),
    Var("IMPRI_DB_WAIT_S", "60", "`60`", "how long `impri serve` waits for the database, and `impri waitdb` (the image's start script) for the database and Redis, before it exits 1 (one line per attempt)", "serve, waitdb (the image's start script)"),
    Var("IMPRI_DB_POOL_TIMEOUT_S", "10", "`10`", "how long a request waits for a pooled connection before answering 503", "all"),
    Var("IMPRI_PROCESS_ROLE", "", "set by `impri`", "serve, worker, beat, mcp, or command (any other but runserver and check); picks the pool size, and a worker, mcp or command installs no daphne app", "all"),
    Var("IMPRI_LAYER_CAPACITY", "10000", "`10000`", "messages one channel may hold (each process's waiter hub has one channel)", "serve, worker"),
    Var("IMPRI_MCP_AWAIT_CAP_S", "50", "`50`", "MCP wait cap without a progress token", "serve, mcp"),
    Var("IMPRI_MCP_PROGRESS_EVERY_S", "12", "`12`", "MCP progress notification interval", "serve, mcp"),
    Var("IMPRI_UNDECLARED_KINDS", "strict", "`strict`", "a kind that declares no money (rules file `kinds:`, a gateway tool's `money:`) moves an unknown amount, held over every threshold: no service token, Slack or `auto_approve` rule approves it, the inbox asks for the second factor; `detect` reads its payload with the detector instead, for a migration period only (warned at start; [docs/rules.md](docs/rules.md))", "serve, mcp, worker"),
    Var("IMPRI_DEFAULT_GROUP", "reviewers", "`reviewers`", "reviewer group for actions no rule routes elsewhere", "serve, mcp"),
    Var("IMPRI_RATE_LIMIT_PER_MIN", "600", "`600`", "requests per minute per key (429 above); `0` is off", "serve, mcp"),
    Var("IMPRI_AUDIT_CHECKPOINT_KEY", "", "`SECRET_KEY`", "signs audit checkpoints (`impri audit checkpoint`) and the stored verification runs that routine verification starts from", "serve, worker, beat, audit"),
    Var("IMPRI_GRANT_SIGNING_KEY", "", "generated in the data dir", "Ed25519 key (PEM) that signs approval grants; share one across processes", "serve, mcp, worker, beat, grantkey"),
    Var("IMPRI_GRANT_SIGNING_KEY_FILE", "", "generated in the data dir", "Ed25519 key (PEM) that signs approval grants; share one across processes", "serve, mcp, worker, beat, grantkey"),
    Var("IMPRI_GRANT_TTL_S", "3600", "`3600`", "how long an approval's grant is valid", "serve, mcp"),
    Var("IMPRI_KEY_LIVE_S", "86400", "`86400`", "`impri grantkey retire` refuses a grant signing key that a process published at its start or signed with this recently (each process notes its key once a minute), unless `--force`; keep it above `IMPRI_GRANT_TTL_S`", "grantkey, serve, mcp, worker"),
    Var("IMPRI_BEHIND_PROXY", "false", "`false`", "older name: `true` switches on the same HTTPS mode as an `https://` `IMPRI_BASE_URL`", "serve"),
    Var("IMPRI_SECURE_COOKIES", "false", "`false`", "older name: `true` switches on the same HTTPS mode as an `https://` `IMPRI_BASE_URL`", "serve"),
    Var("IMPRI_TRUSTED_PROXIES", "", "empty", "CIDRs of proxies whose `X-Forwarded-For` is believed for the client address (login lockouts, the audit's `ip`); e.g. `10.0.0.0/8`", "serve"),
    Var("IMPRI_LOGIN_FAILURE_LIMIT", "5", "`5`", "failed logins for one username from one client address before it is locked out (django-axes; 429 with `Retry-After`)", "serve"),
    Var("IMPRI_LOGIN_LOCKOUT_S", "900", "`900`", "how long such a lockout lasts", "serve"),
    Var("IMPRI_OIDC_ISSUER", "", "empty (SSO off)", "single sign-on with OpenID Connect: the provider's issuer, the client registered there and its secret (`_FILE` variants); [docs/sso.md](docs/sso.md)", "serve"),
    Var("IMPRI_OIDC_CLIENT_ID", "", "empty (SSO off)", "single sign-on with OpenID Connect: the provider's issuer, the client registered there and its secret (`_FILE` variants); [docs/sso.md](docs/sso.md)", "serve"),
    Var("IMPRI_OIDC_CLIENT_SECRET", "", "empty (SSO off)", "single sign-on with OpenID Connect: the provider's issuer, the client registered there and its secret (`_FILE` variants); [docs/sso.md](docs/sso.md)", "serve"),
    Var("IMPRI_OIDC_GROUPS_CLAIM", "", "empty", "the claim listing the person's groups: their Impri reviewer groups are set from it at every sign-in", "serve"),
    Var("IMPRI_OIDC_SSO_ONLY", "false", "`false`", "password login only for staff and superusers; reviewers sign in with SSO", "serve"),
    Var("IMPRI_OIDC_SCOPES", "openid email profile", "`openid email profile`", "scopes asked of the provider", "serve"),
    Var("IMPRI_OIDC_AUTHORIZATION_ENDPOINT", "", "from discovery", "explicit provider endpoints instead of `/.well-known/openid-configuration`", "serve"),
    Var("IMPRI_OIDC_TOKEN_ENDPOINT", "", "from discovery", "explicit provider endpoints instead of `/.well-known/openid-configuration`", "serve"),
    Var("IMPRI_OIDC_USERINFO_ENDPOINT", "", "from discovery", "explicit provider endpoints instead of `/.well-known/openid-configuration`", "serve"),
    Var("IMPRI_OIDC_JWKS_URI", "", "from discovery", "explicit provider endpoints instead of `/.well-known/openid-configuration`", "serve"),
    Var("IMPRI_OIDC_TIMEOUT_S", "10", "`10`", "timeout of each call to the provider", "serve"),
    Var("IMPRI_REQUIRE_2FA", "false", "`false`", "`true`: every password login must pass a TOTP code, and users without one enrol first (docs/2fa.md)", "serve"),
    Var("IMPRI_STEP_UP_CENTS", "0", "empty (off)", "approving an amount at or above this (minor units) needs a second factor from the last 10 minutes; service tokens can never (docs/2fa.md)", "serve, mcp"),
    Var("IMPRI_STATIC_ROOT", "", "empty", "target of `collectstatic` (optional)", "collectstatic"),
    Var("IMPRI_TICK_S", "2", "`2`", "how often expiry, webhooks and notifications are swept", "serve (embedded), beat"),
    Var("IMPRI_SLOW_TICK_S", "15", "`15`", "how often escalations, reminders and stale approvals are swept", "serve (embedded), beat"),
    Var("IMPRI_REPORT_DEADLINE_S", "3600", "`3600`", "an approval with no reported result after this is flagged and notified", "serve, worker"),
    Var("IMPRI_WEBHOOK_TIMEOUT_S", "10", "`10`", "per-attempt timeout of a webhook POST", "serve, worker"),
    Var("IMPRI_WEBHOOK_LEASE_S", "60", "`60`", "how long a worker owns a delivery it is sending; after that another sends it again (same `webhook-id`)", "serve, worker"),
    Var("IMPRI_DELIVERY_CONCURRENCY", "8", "`8`", "threads per delivery lane (webhooks, notifications) per process", "serve, worker"),
    Var("IMPRI_DELIVERY_PER_DESTINATION", "2", "`2`", "most deliveries in flight to one destination, and for one agent's callbacks, per process: a receiver that never answers holds at most this many threads", "serve, worker"),
    Var("IMPRI_CALLBACK_ALLOWED_NETWORKS", "", "empty", "internal networks (comma-separated CIDRs) that `callback_url` and admin-entered Slack webhook URLs may reach; otherwise loopback, private, link-local, CGNAT, unique-local and unspecified addresses are refused ([docs/security.md](docs/security.md))", "serve, worker"),
    Var("IMPRI_SLACK_BOT_TOKEN", "", "empty (no Slack app)", "the Slack app's bot token: Block Kit messages with Approve / Edit / Reject in each reviewer group's channel ([docs/slack.md](docs/slack.md))", "serve, worker"),
    Var("IMPRI_SLACK_SIGNING_SECRET", "", "empty (interactivity refused)", "verifies Slack's requests to `/integrations/slack/interactivity`", "serve"),
    Var("IMPRI_SLACK_API_URL", "", "`https://slack.com/api/`", "Slack's Web API base URL", "serve, worker"),
    Var("IMPRI_VAPID_PRIVATE_KEY", "", "generated once into `IMPRI_DATA_DIR/vapid_private_key.pem`", "the P-256 key (PEM) that signs Web Push messages to reviewers' phones (VAPID, RFC 8292); `IMPRI_VAPID_PRIVATE_KEY_FILE` for a file; every process must share it, and after a change every phone must turn notifications on again ([docs/inbox.md](docs/inbox.md))", "serve, worker"),
    Var("IMPRI_VAPID_SUBJECT", "", "the `https://` `IMPRI_BASE_URL`, else `mailto:impri@localhost`", "the contact push services are given with each push (`mailto:` or `https:` URL)", "serve, worker"),
    Var("IMPRI_SLACK_MAX_APPROVE_CENTS", "50000", "`50000`", "no approving or editing from Slack above this amount (minor units); the inbox still can", "serve, mcp"),
    Var("IMPRI_RETENTION_DAYS", "90", "`90`", "delivered or given-up webhooks (and their attempts), notifications and budget windows older than this are pruned hourly (`impri prune` does it now); `0` keeps everything; the audit log is never pruned", "serve, worker"),
    Var("IMPRI_AUDIT_VERIFY_EVERY_S", "3600", "`3600`", "the audit chain is verified this often in the background, from the last verified run (`0`: only on demand); `/metrics` and the admin index show the latest result", "serve (embedded), beat"),
    Var("IMPRI_STRIPE_WEBHOOK_SECRET", "", "empty (Stripe's endpoint answers 400)", "the signing secret(s) of Stripe's webhook endpoint `POST /integrations/stripe/events` (`whsec_...`), comma-separated while rotating; see [docs/reconciliation.md](docs/reconciliation.md)", "serve"),
    Var("IMPRI_LEDGER_SETTLE_H", "24", "`24`", "hours after an `executed` report with no movement from the processor before the action reads as `unsettled`", "serve (embedded), worker"),
    Var("IMPRI_LEDGER_WEBHOOK_URL", "", "empty (no operator webhook)", "the operator's endpoint for `ledger.exception` webhooks (Standard Webhooks, signed with `IMPRI_LEDGER_WEBHOOK_SECRET`), one per exception besides the action's `callback_url`; [docs/reconciliation.md](docs/reconciliation.md)", "serve, worker"),
    Var("IMPRI_LEDGER_WEBHOOK_SECRET", "", "empty (nothing is sent)", "the `whsec_...` secret the `ledger.exception` webhooks to `IMPRI_LEDGER_WEBHOOK_URL` are signed with (a webhook without a valid one is given up, the reason in admin)", "serve, worker"),
    Var("IMPRI_METRICS_TOKEN", "", "empty (metrics off)", "bearer token for `GET /metrics` (Prometheus); see [docs/metrics.md](docs/metrics.md)", "serve"),
    Var("EMAIL_HOST", "", "empty (mail is logged)", "SMTP for notifications; without `EMAIL_HOST` mail is logged", "serve, worker"),
    Var("EMAIL_PORT", "587", "`587`", "SMTP for notifications; without `EMAIL_HOST` mail is logged", "serve, worker"),
    Var("EMAIL_HOST_USER", "", "empty", "SMTP for notifications; without `EMAIL_HOST` mail is logged", "serve, worker"),
    Var("EMAIL_HOST_PASSWORD", "", "empty", "SMTP for notifications; without `EMAIL_HOST` mail is logged", "serve, worker"),
    Var("EMAIL_USE_TLS", "true", "`true`", "SMTP for notifications; without `EMAIL_HOST` mail is logged", "serve, worker"),
    Var("DEFAULT_FROM_EMAIL", "impri@localhost", "`impri@localhost`", "SMTP for notifications; without `EMAIL_HOST` mail is logged", "serve, worker"),
    Var("EMAIL_TIMEOUT", "10", "`10`", "SMTP for notifications; without `EMAIL_HOST` mail is logged", "serve, worker"),
    Var("IMPRI_DEBUG", "false", "`false`", "Django debug pages; never in production", "all"),
    Var("IMPRI_LOG_LEVEL", "INFO", "`INFO`", "root log level", "all"),
    Var("IMPRI_LOG_FORMAT", "plain", "`plain`", "`json`: one JSON object per line on stderr, with `request_id` and, per request, `method`, `path`, `status`, `duration_ms`", "all"),
    Var("IMPRI_REVIEWER_PASSWORD", "", "empty", "the password `impri createreviewer` sets when neither `--password-prompt` nor `--password-file` is given (kept out of the process list)", "createreviewer"),
    Var("NO_COLOR", "", "empty", "any value turns colour off in `impri agents` and other tables printed to a terminal (no-color.org); colour is never sent into a pipe", "agents"),
]
# fmt: on

BY_NAME = {var.name: var for var in VARIABLES}


def default(name: str) -> str:
    """The listed default of ``name``; a name that is not listed is a programming error."""
    try:
        return BY_NAME[name].default
    except KeyError:
        raise KeyError(f"{name} is not listed in impri/settings_vars.py") from None


def markdown() -> str:
    lines = [
        "# Configuration",
        "",
        "<!-- Generated from impri/settings_vars.py: python -m impri.settings_vars "
        "> docs/configuration.md -->",
        "",
        "Environment variables only; each also accepts `NAME_FILE=/path` (Docker secrets), "
        "which wins over `NAME`. `.env.example` lists them all. *Read by*: the `impri` "
        "commands that read the variable (`all`: every one).",
        "",
        "| variable | default | meaning | read by |",
        "|---|---|---|---|",
    ]
    for var in VARIABLES:
        meaning = var.meaning.replace("](docs/", "](").replace("|", "\\|")
        lines.append(f"| `{var.name}` | {var.shown} | {meaning} | {var.roles} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
