"""Reviewer logins (and failed attempts) go into the audit log."""

from __future__ import annotations

from django.contrib.auth.signals import user_logged_in, user_login_failed
from django.db import transaction
from django.dispatch import receiver

from . import log
from .models import ActorType


def _client(request) -> dict:
    if request is None:
        return {}
    return {
        "ip": request.META.get("REMOTE_ADDR", ""),
        "user_agent": request.META.get("HTTP_USER_AGENT", "")[:200],
    }


@receiver(user_logged_in)
def record_login(sender, request, user, **kwargs):
    with transaction.atomic():
        log.record(
            "reviewer.login",
            actor_type=ActorType.REVIEWER,
            actor_id=user.get_username(),
            actor_ref=f"user:{user.pk}",
            data=_client(request),
        )


@receiver(user_login_failed)
def record_failed_login(sender, credentials, request=None, **kwargs):
    username = str(credentials.get("username", ""))[:150]
    with transaction.atomic():
        log.record(
            "reviewer.login_failed",
            actor_type=ActorType.SYSTEM,
            actor_id="auth",
            data={"username": username, **_client(request)},
        )
