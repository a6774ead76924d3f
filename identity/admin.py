"""Single sign-on in the admin: a user's links to the identity provider, as an inline.

``ops.admin.approvals`` shows it on the user's page (Django's user admin, with reviewer tokens).
"""

from django.contrib import admin

from .models import SsoIdentity


class SsoIdentityInline(admin.TabularInline):
    """Who this user is at the identity provider; add one to link an account by hand."""

    model = SsoIdentity
    fields = ("issuer", "subject", "created_at", "last_login_at")
    readonly_fields = ("created_at", "last_login_at")
    extra = 0

    def has_change_permission(self, request, obj=None):
        return False  # relink by deleting and adding: each is one audited event
