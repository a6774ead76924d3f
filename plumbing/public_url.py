"""The one public base URL that every link Impri writes starts with.

Links go into API answers (``inbox_url``), MCP results, e-mails, Slack
messages and the MCP server's metadata. They all come from :func:`base_url`:
``IMPRI_BASE_URL`` when it is set (behind a proxy or a load balancer, set
it); else the origin the current request came in on (REST, MCP over HTTP);
else where ``impri serve`` listens (``IMPRI_HOST``:``IMPRI_PORT``), which is
right on the machine that runs Impri and nowhere else, so a system check
warns when a production deployment leaves ``IMPRI_BASE_URL`` unset.
"""

from __future__ import annotations

from django.conf import settings
from django.core import checks

UNSPECIFIED = {"", "0.0.0.0", "::"}


def base_url(request_origin: str | None = None) -> str:
    """Scheme, host and port, without a trailing slash."""
    if settings.IMPRI_BASE_URL:
        return settings.IMPRI_BASE_URL
    if request_origin:
        return request_origin.rstrip("/")
    host = "127.0.0.1" if settings.IMPRI_HOST in UNSPECIFIED else settings.IMPRI_HOST
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{settings.IMPRI_PORT}"


@checks.register(checks.Tags.compatibility)
def base_url_is_set(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    """Production (scaled, or listening beyond loopback) without IMPRI_BASE_URL: a warning."""
    if settings.IMPRI_BASE_URL or settings.DEBUG:
        return []
    listening_beyond_loopback = settings.IMPRI_HOST in UNSPECIFIED or not (
        settings.IMPRI_HOST.startswith("127.") or settings.IMPRI_HOST in ("localhost", "::1")
    )
    if not (settings.DATABASE_URL or listening_beyond_loopback):
        return []
    return [
        checks.Warning(
            "IMPRI_BASE_URL is not set: links in e-mails, Slack messages and MCP results "
            f"will point at {base_url()}, which reviewers elsewhere cannot open.",
            hint="Set IMPRI_BASE_URL to the address reviewers use, e.g. https://impri.example.com",
            id="impri.W001",
        )
    ]
