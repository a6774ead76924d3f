from __future__ import annotations

from asgiref.sync import iscoroutinefunction, markcoroutinefunction, sync_to_async
from django.conf import settings
from django.http import JsonResponse
from django.middleware.security import SecurityMiddleware
from whitenoise.middleware import WhiteNoiseMiddleware


def too_large_response(limit: int) -> JsonResponse:
    return JsonResponse(
        {
            "detail": f"request body is larger than the limit of {limit} bytes (IMPRI_MAX_BODY_BYTES)"
        },
        status=413,
    )


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


class StaticFilesMiddleware(DualModeMiddleware):
    """WhiteNoise, async-capable: a static file is served from a thread, the rest stays async."""

    def __init__(self, get_response):
        super().__init__(get_response)
        self.whitenoise = WhiteNoiseMiddleware(get_response)

    def _static_file(self, request):
        if self.whitenoise.autorefresh:
            return self.whitenoise.find_file(request.path_info)
        return self.whitenoise.files.get(request.path_info)

    def before(self, request):
        static_file = self._static_file(request)
        return None if static_file is None else self.whitenoise.serve(static_file, request)

    async def _acall(self, request):
        static_file = self._static_file(request)
        if static_file is not None:
            serve = sync_to_async(self.whitenoise.serve, thread_sensitive=False)
            return await serve(static_file, request)
        return await self.get_response(request)


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
        response.setdefault("X-Frame-Options", "DENY")
        return response
