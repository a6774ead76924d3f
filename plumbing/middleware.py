"""The base every middleware of Impri's stands on, and the one 413 body.

The middleware themselves (body limit, static files, API headers) are the
project's (``impri.middleware``); apps that add one of their own (the inbox,
two-factor, audit identity) subclass ``DualModeMiddleware`` from here.
"""

from __future__ import annotations

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.http import JsonResponse


def too_large(limit: int) -> dict:
    """The 413 answer's body, the same on every path (REST, MCP, the inbox, the gateway).

    One limit, ``IMPRI_MAX_BODY_BYTES``, is enforced twice on purpose: here on a
    declared Content-Length (the Django stacks), and by ``impri.asgi.BodyLimit``
    on every HTTP request, counting a chunked body as it streams.
    ``DATA_UPLOAD_MAX_MEMORY_SIZE`` is the same figure.
    """
    return {
        "detail": f"request body is larger than the limit of {limit} bytes (IMPRI_MAX_BODY_BYTES)",
        "code": "too_large",
    }


def too_large_response(limit: int) -> JsonResponse:
    return JsonResponse(too_large(limit), status=413)


class DualModeMiddleware:
    """Base for middleware that runs in the request's own mode, sync or async.

    Every middleware on an async path must be async-capable: Django runs a
    sync-only one in a thread and calls the rest of the chain from there, so
    a long-poll behind it would hold that thread for as long as it waits.
    Subclasses write ``before(request)`` (a response ends the request early)
    and ``after(request, response)``.
    """

    sync_capable = True
    async_capable = True

    def __init__(self, get_response):
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request):
        if self.is_async:
            return self._acall(request)
        early = self.before(request)
        if early is not None:
            return early
        return self.after(request, self.get_response(request))

    async def _acall(self, request):
        early = self.before(request)
        if early is not None:
            return early
        return self.after(request, await self.get_response(request))

    def before(self, request):
        return None

    def after(self, request, response):
        return response
