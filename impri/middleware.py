from __future__ import annotations

from django.conf import settings
from django.http import JsonResponse


def too_large_response(limit: int) -> JsonResponse:
    return JsonResponse(
        {
            "detail": f"request body is larger than the limit of {limit} bytes (IMPRI_MAX_BODY_BYTES)"
        },
        status=413,
    )


class BodySizeLimitMiddleware:
    """Answer 413 for a declared Content-Length above ``IMPRI_MAX_BODY_BYTES``.

    Bodies without a Content-Length are counted at the ASGI layer
    (``impri.asgi.BodyLimit``) before Django reads them.
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        limit = settings.IMPRI_MAX_BODY_BYTES
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        if length > limit:
            return too_large_response(limit)
        return self.get_response(request)
