"""Error pages: JSON on the API (``/api/``, ``/mcp``), Django's HTML elsewhere."""

from __future__ import annotations

from django.http import JsonResponse
from django.views import defaults

JSON_PREFIXES = ("/api/", "/mcp")


def _wants_json(request) -> bool:
    return request.path.startswith(JSON_PREFIXES)


def not_found(request, exception=None):
    if _wants_json(request):
        return JsonResponse(
            {"detail": f"no such endpoint: {request.path}", "code": "not_found"}, status=404
        )
    return defaults.page_not_found(request, exception)


def server_error(request):
    if _wants_json(request):
        return JsonResponse(
            {"detail": "internal error; it was logged", "code": "internal"}, status=500
        )
    return defaults.server_error(request)


def bad_request(request, exception=None):
    if _wants_json(request):
        return JsonResponse({"detail": "bad request", "code": "bad_request"}, status=400)
    return defaults.bad_request(request, exception)
