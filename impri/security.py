"""Who is asking, and how a locked-out login is answered.

``client_address`` is the one place that decides a request's client address:
login lockouts (django-axes) and the audit log's ``ip`` both use it.
"""

from __future__ import annotations

from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.http import HttpResponse

from plumbing.addresses import origin_allowed


def lockout_response(request, original_response=None, credentials=None) -> HttpResponse:
    """django-axes' answer once a username and address are locked: 429 with Retry-After."""
    seconds = int(settings.AXES_COOLOFF_TIME.total_seconds())
    response = HttpResponse(
        f"Too many failed logins for this account from your address. Try again in "
        f"{max(1, seconds // 60)} minutes.",
        status=429,
        content_type="text/plain; charset=utf-8",
    )
    response["Retry-After"] = str(seconds)
    return response


class ExactOriginValidator:
    """Refuse a websocket whose Origin is not exactly this site (see ``origin_allowed``)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        headers = dict(scope.get("headers", []))
        origin = headers.get(b"origin", b"").decode("latin-1")
        host = headers.get(b"host", b"").decode("latin-1")
        if not origin_allowed(origin, host):
            return await WebsocketDenier()(scope, receive, send)  # HTTP 403
        return await self.app(scope, receive, send)
