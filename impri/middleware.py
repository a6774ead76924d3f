from __future__ import annotations

from django.conf import settings
from django.http import HttpResponseBadRequest, JsonResponse
from django.middleware.security import SecurityMiddleware

from plumbing.middleware import DualModeMiddleware, too_large_response


class BodySizeLimitMiddleware(DualModeMiddleware):
    """Answer 413 for a declared Content-Length above ``IMPRI_MAX_BODY_BYTES``.

    Bodies without a Content-Length are counted at the ASGI layer
    (``impri.asgi.BodyLimit``) before Django reads them.
    """

    def before(self, request):
        limit = settings.IMPRI_MAX_BODY_BYTES
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        if length > limit:
            return too_large_response(limit)
        return None


class ApiSecurityMiddleware(DualModeMiddleware):
    """Django's SecurityMiddleware (nosniff, HSTS, SSL redirect, referrer policy), inline.

    Its methods only read settings and set headers, so under an async view they
    run in the event loop instead of hopping to a thread twice per request.
    """

    def __init__(self, get_response):
        super().__init__(get_response)
        self.security = SecurityMiddleware(get_response)

    def before(self, request):
        return self.security.process_request(request)

    def after(self, request, response):
        response = self.security.process_response(request, response)
        response = _as_json_error(response)
        response.setdefault("X-Frame-Options", "DENY")
        # Answers carry payloads and decisions: no cache may keep them.
        response.setdefault("Cache-Control", "no-store")
        return response


class RefuseNulMiddleware(DualModeMiddleware):
    """Refuse a NUL in the path or the query string before any view sees it.

    PostgreSQL can't hold a NUL in text, so a lookup with one fails inside the
    database driver; no Impri id, filter or name ever contains one. The API
    answers a 422 naming the parameter, a page a plain 400.
    """

    def before(self, request):
        field = None
        if "\x00" in request.path:
            field = "path"
        else:
            for name, values in request.GET.lists():
                if "\x00" in name or any("\x00" in value for value in values):
                    field = name.replace("\x00", "\\x00")
                    break
        if field is None:
            return None
        detail = f"{field}: must not contain NUL characters"
        if request.path.startswith(("/api/", "/mcp")):
            return JsonResponse({"detail": detail, "code": "invalid", "field": field}, status=422)
        return HttpResponseBadRequest(detail, content_type="text/plain; charset=utf-8")


def _as_json_error(response):
    """Django's own refusals on the API (a 405 for a wrong method, say) answer JSON too."""
    if response.status_code < 400 or getattr(response, "streaming", False):
        return response
    if response.get("Content-Type", "").startswith("application/json"):
        return response
    text = response.content.decode("utf-8", "replace").strip()[:500]
    replaced = JsonResponse(
        {"detail": text or response.reason_phrase, "code": f"http_{response.status_code}"},
        status=response.status_code,
    )
    for header in ("Allow", "Retry-After", "WWW-Authenticate"):
        if header in response:
            replaced[header] = response[header]
    return replaced
