"""The "Impri administration" site: the index shows what an operator checks first.

Health (database, channel layer, recent fail-soft fallbacks), the queue, the
outbox backlog and the audit chain's status sit above the usual model list,
with a button that verifies the chain now.
"""

from __future__ import annotations

import logging

from asgiref.sync import async_to_sync
from django.conf import settings
from django.contrib import admin, messages
from django.http import HttpResponseRedirect
from django.urls import path, reverse
from django.utils import timezone
from django.views.decorators.http import require_POST

from approvals import grants
from audit import verification
from plumbing import fallbacks

from .health import _check_layer
from .status import chain, outbox, queue

logger = logging.getLogger(__name__)


class ImpriAdminSite(admin.AdminSite):
    site_header = "Impri administration"
    site_title = "Impri administration"
    index_title = "Operations"
    index_template = "admin/impri_index.html"

    def index(self, request, extra_context=None):
        return super().index(request, {"ops": status(), **(extra_context or {})})

    def get_urls(self):
        verify = self.admin_view(require_POST(self.verify_chain_view))
        return [path("verify-chain/", verify, name="verify_chain"), *super().get_urls()]

    def verify_chain_view(self, request):
        """Verify the whole chain now (a superuser's button on the index)."""

        if not request.user.is_superuser:
            messages.error(request, "Only a superuser can run a verify from here.")
        else:
            result = verification.verify_and_record(by=f"admin:{request.user.get_username()}")
            if result.ok:
                messages.success(
                    request, f"Audit chain intact: {result.checked} event(s) verified."
                )
            else:
                messages.error(
                    request,
                    f"Audit chain BROKEN at #{result.first_broken_seq}: {result.problem}",
                )
        return HttpResponseRedirect(reverse("admin:index"))


def status() -> dict:

    now = timezone.now()
    head, verified = chain()
    return {
        "mode": "scaled" if settings.REDIS_URL else "embedded",
        "database": settings.DATABASES["default"]["ENGINE"].rsplit(".", 1)[-1],
        "layer": _layer_status(),
        "fallbacks": dict(sorted(fallbacks.counts.items())),
        "queue": queue(now),
        "lanes": outbox(now),
        "chain_events": head,
        "verified": verified,
        "verify_every_s": settings.IMPRI_AUDIT_VERIFY_EVERY_S,
        "retention_days": settings.IMPRI_RETENTION_DAYS,
        "grant_keys": grants.keys_signing(),
        "grant_keys_problem": grants.several_keys_problem(),
    }


def _layer_status() -> str:

    try:
        return async_to_sync(_check_layer)()
    except Exception as exc:  # the page must render whatever the layer does
        logger.warning("admin index: channel layer check failed: %s", exc)
        return f"error: {type(exc).__name__}"
