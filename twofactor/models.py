"""Passkeys (WebAuthn): a second factor beside or instead of the authenticator app.

A passkey is a django-otp ``Device``, so a session it verified is verified the
way a TOTP code's is (``request.user.otp_device``, ``is_verified()``), and the
same session stamp carries step-up for money (``twofactor.services``).
"""

from __future__ import annotations

from django.db import models
from django.utils import timezone
from django_otp.models import Device


class PasskeyDevice(Device):
    """One WebAuthn credential of one reviewer: its id, public key and signature counter."""

    credential_id = models.CharField(max_length=1400, unique=True)  # base64url
    public_key = models.TextField()  # COSE key, base64url
    sign_count = models.PositiveBigIntegerField(default=0)
    transports = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta(Device.Meta):
        verbose_name = "passkey"

    def verify_token(self, token) -> bool:
        return False  # a passkey is verified by a WebAuthn assertion (twofactor.passkeys), never a code
