"""Reviewer logins and lockouts go into the audit log; single failed guesses don't.

A failed login carries an attacker-chosen username: one immutable audit event
per guess would let anyone flood the chain. django-axes counts the failures;
the chain gets one ``reviewer.locked_out`` event when a username is locked for
an address (not one per attempt while the lock lasts).
"""

from __future__ import annotations

from axes.signals import user_locked_out
from django.conf import settings
from django.contrib.auth.signals import user_logged_in
from django.db import transaction
from django.dispatch import receiver

from plumbing.addresses import client_address

from . import log
from .models import ActorType


def _client(request) -> dict:
    if request is None:
        return {}
    return {
        "ip": client_address(request),
        "user_agent": request.META.get("HTTP_USER_AGENT", "")[:200],
    }


@receiver(user_logged_in)
def record_login(sender, request, user, **kwargs):
    data = _client(request)
    if getattr(user, "backend", "") == "identity.oidc.ImpriOIDCBackend":
        data["method"] = "oidc"  # single sign-on (docs/sso.md); a password login names none
    with transaction.atomic():
        log.record(
            "reviewer.login",
            actor_type=ActorType.REVIEWER,
            actor_id=user.get_username(),
            actor_ref=f"user:{user.pk}",
            data=data,
        )


@receiver(user_locked_out)
def record_lockout(sender, request, username, ip_address, **kwargs):
    # axes signals on the failure that locks and again on each attempt while
    # locked; only the first carries the failure count that reached the limit.
    if getattr(request, "axes_failures_since_start", None) != settings.AXES_FAILURE_LIMIT:
        return
    with transaction.atomic():
        log.record(
            "reviewer.locked_out",
            actor_type=ActorType.SYSTEM,
            actor_id="auth",
            data={
                "username": str(username or "")[:150],
                "failures": settings.AXES_FAILURE_LIMIT,
                "locked_for_s": int(settings.AXES_COOLOFF_TIME.total_seconds()),
                **_client(request),
            },
        )
