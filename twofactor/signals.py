"""Removing an authenticator is audited wherever it happens (the reviewer, admin, the shell)."""

from __future__ import annotations

from django.contrib.auth.signals import user_logged_in
from django.db import transaction
from django.db.models.signals import post_delete
from django.dispatch import receiver
from django_otp.plugins.otp_totp.models import TOTPDevice

from audit import log as audit
from audit.identity import current_actor, user_ref

from .models import PasskeyDevice
from .services import SESSION_AT


@receiver(post_delete, sender=PasskeyDevice)
@receiver(post_delete, sender=TOTPDevice)
def record_removal(sender, instance: TOTPDevice | PasskeyDevice, **kwargs):
    if not instance.confirmed:  # an enrolment never finished: nothing was protected by it
        return
    user = instance.user
    with transaction.atomic():
        audit.record(
            "twofactor.device_removed",
            **current_actor(),
            data={"user": user.get_username(), "user_ref": user_ref(user), "device": instance.name},
        )


@receiver(user_logged_in)
def forget_earlier_factor(sender, request, user, **kwargs):
    # A new sign-in starts its own step-up clock.
    if request is not None and hasattr(request, "session"):
        request.session.pop(SESSION_AT, None)
