"""A Content-Security-Policy for the reviewer's pages.

Agent text is rendered on these pages; escaping and sanitizing keep it text,
and this policy is the second wall: no inline script, no eval, no plugin, no
framing, no form posting elsewhere, no network but our own origin (which
includes the page's own ws:/wss: in CSP Level 3).
"""

from __future__ import annotations

from django.conf import settings

from plumbing.middleware import DualModeMiddleware


class ContentSecurityPolicyMiddleware(DualModeMiddleware):
    """The policy (the admin's own, slightly looser for its inline styles) and browser headers.

    Pages carry agent text and decisions: ``Cache-Control: no-store`` keeps them
    out of shared and back-button caches (static files are answered before this).
    """

    def after(self, request, response):
        response.setdefault("Cache-Control", "no-store")
        response.setdefault("Permissions-Policy", settings.IMPRI_PERMISSIONS_POLICY)
        if "Content-Security-Policy" in response:
            return response
        exempt = settings.IMPRI_CSP_EXEMPT_PREFIXES
        if request.path.startswith(exempt):
            return response
        if response.get("Content-Type", "").startswith("text/html"):
            admin = request.path.startswith("/admin/")
            policy = settings.IMPRI_ADMIN_CSP if admin else settings.IMPRI_CSP
            response["Content-Security-Policy"] = policy
        return response
