"""The installable inbox: a web app manifest, a service worker scoped to /inbox/, an offline page.

None of the three carries a reviewer's data, so they are served to anyone (a browser
fetches the manifest without cookies). The service worker lives at /inbox/sw.js, so its
scope is the inbox and nothing above it; it caches only the offline page and the files
that page needs (reviewer pages are ``no-store`` and stay so), shows pushes
(``webpush``) as notifications, and opens the action a tapped notification names.
"""

from __future__ import annotations

import hashlib
import json

from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.templatetags.static import static
from django.views.decorators.http import require_GET, require_safe

SCOPE = "/inbox/"
THEME = "#111827"
BACKGROUND = "#f6f7f9"


def manifest_data() -> dict:
    return {
        "id": SCOPE,
        "name": "Impri inbox",
        "short_name": "Impri",
        "description": "Approve or reject what your AI agents ask to do.",
        "start_url": SCOPE,
        "scope": SCOPE,
        "display": "standalone",
        "orientation": "any",
        "background_color": BACKGROUND,
        "theme_color": THEME,
        "icons": [
            {"src": static("inbox/icons/icon-192.png"), "sizes": "192x192", "type": "image/png"},
            {"src": static("inbox/icons/icon-512.png"), "sizes": "512x512", "type": "image/png"},
            {
                "src": static("inbox/icons/maskable-512.png"),
                "sizes": "512x512",
                "type": "image/png",
                "purpose": "maskable",
            },
        ],
    }


@require_GET
def manifest(request: HttpRequest) -> HttpResponse:
    response = HttpResponse(
        json.dumps(manifest_data(), indent=2), content_type="application/manifest+json"
    )
    response["Cache-Control"] = "no-cache"
    return response


def _precache() -> list[str]:
    return [
        "/inbox/offline",
        static("inbox/inbox.css"),
        static("inbox/icons/icon-192.png"),
    ]


@require_GET
def service_worker(request: HttpRequest) -> HttpResponse:
    precache = _precache()
    # A new cache name whenever what it caches changes (hashed static names change with content).
    version = hashlib.sha256(json.dumps(precache).encode()).hexdigest()[:12]
    body = render_to_string(
        "inbox/sw.js",
        {
            "version_json": json.dumps(f"impri-{version}"),
            "precache_json": json.dumps(precache),
            "offline_json": json.dumps("/inbox/offline"),
            "scope_json": json.dumps(SCOPE),
            "icon_json": json.dumps(static("inbox/icons/icon-192.png")),
        },
    )
    response = HttpResponse(body, content_type="text/javascript; charset=utf-8")
    response["Service-Worker-Allowed"] = SCOPE
    # Browsers check for a new worker on navigation; never serve them a stale one.
    response["Cache-Control"] = "no-cache"
    return response


@require_GET
def offline(request: HttpRequest) -> HttpResponse:
    response = render(request, "inbox/offline.html", {"theme": THEME})
    # Cached by the service worker, so it must not say whose it is: no user, no tokens.
    response["Cache-Control"] = "no-cache"
    return response


@require_safe
def favicon(request: HttpRequest) -> HttpResponse:
    """Browsers ask every site for /favicon.ico: the inbox's icon, not a 404 in every log."""
    return redirect(static("inbox/icons/icon-192.png"), permanent=True)
