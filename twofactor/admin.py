"""django-otp's own device admins show the TOTP secret (as a QR code) and the recovery codes
to any staff member: removed. An admin resets a user's two-factor from the user list."""

from __future__ import annotations

from django.contrib import admin
from django_otp.plugins.otp_static.models import StaticDevice
from django_otp.plugins.otp_totp.models import TOTPDevice

for model in (TOTPDevice, StaticDevice):
    if admin.site.is_registered(model):
        admin.site.unregister(model)
