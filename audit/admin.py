from django.contrib import admin

from plumbing.admin import ReadOnlyAdminMixin

from .models import AuditEvent, VerificationRun


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """Read-only: the log is append-only."""

    list_display = ("seq", "at", "event", "actor_type", "actor_id", "actor_ref", "action_id")
    list_filter = ("event", "actor_type", "scheme")
    search_fields = ("action_id", "actor_id", "actor_ref")


@admin.register(VerificationRun)
class VerificationRunAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """Read-only: what each verification of the chain found."""

    list_display = ("pk", "kind", "status", "ok", "checked", "first_broken_seq", "to_seq")
    list_filter = ("kind", "status", "ok")
