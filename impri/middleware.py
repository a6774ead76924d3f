from __future__ import annotations

from django.conf import settings
from django.http import JsonResponse
from django.middleware import common

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


class ApiAnswersMiddleware(DualModeMiddleware):
    """The API's answers: JSON for every error, and never cached.

    On ``/api/`` only (the pages have their own headers): a refusal Django or a
    middleware makes in HTML or text (a 405 for a wrong method, say) becomes the API's
    JSON envelope, ``Cache-Control: no-store`` is set (answers carry payloads and
    decisions) and framing denied, on the refusals of the middleware below it too.
    Async-capable, so it adds no thread hop to an async view.
    """

    def after(self, request, response):
        if not request.path.startswith(API_PREFIX):
            return response
        response = _as_json_error(response)
        response.setdefault("Cache-Control", "no-store")
        response.setdefault("X-Frame-Options", "DENY")
        return response


API_PREFIX = "/api/"


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


# Answered whatever the Host header: a load balancer or an orchestrator probes by address.
PROBE_PATHS = ("/healthz", "/readyz")


class CommonMiddleware(common.CommonMiddleware):
    """Django's ``CommonMiddleware``, except on the probes.

    Its ``process_request`` reads ``request.get_host()``, which refuses a Host outside
    ``ALLOWED_HOSTS`` (a 400): the probes answer whatever Host they are sent, as the pages
    and the API do not.
    """

    def process_request(self, request):
        if request.path in PROBE_PATHS:
            return None
        return super().process_request(request)
