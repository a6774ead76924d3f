"""A Content-Security-Policy for the reviewer's pages.

Agent text is rendered on these pages; escaping and sanitizing keep it text,
and this policy is the second wall: no inline script, no eval, no plugin, no
framing, no form posting elsewhere, no network but our own origin (which
includes the page's own ws:/wss: in CSP Level 3).
"""

from __future__ import annotations

from django.conf import settings

from impri.middleware import DualModeMiddleware


class ContentSecurityPolicyMiddleware(DualModeMiddleware):
    def after(self, request, response):
        if "Content-Security-Policy" in response:
            return response
        exempt = settings.IMPRI_CSP_EXEMPT_PREFIXES
        if request.path.startswith(exempt):
            return response
        if response.get("Content-Type", "").startswith("text/html"):
            response["Content-Security-Policy"] = settings.IMPRI_CSP
        return response
