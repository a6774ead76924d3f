"""The base every middleware of Impri's stands on, and the one 413 body.

The NUL refusal is here (the decision long-poll's consumer, ``waiting.consumers``, gives
the same answer); the other middleware (body limit, API answers) are the project's
(``impri.middleware``); apps that add one of their own (the inbox,
two-factor, audit identity) subclass ``DualModeMiddleware`` from here.
"""

from __future__ import annotations

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.http import HttpResponseBadRequest, JsonResponse


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
