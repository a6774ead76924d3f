from django.contrib import admin

from .models import AuditEvent, ChainVerification


@admin.register(AuditEvent)
class AuditEventAdmin(admin.ModelAdmin):
    """Read-only: the log is append-only."""

    list_display = ("seq", "at", "event", "actor_type", "actor_id", "action_id")
    list_filter = ("event", "actor_type")
    search_fields = ("action_id", "actor_id")

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(ChainVerification)
class ChainVerificationAdmin(admin.ModelAdmin):
    """The latest full verify (written by every verify; shown on the admin index too)."""

    list_display = ("at", "ok", "checked", "first_broken_seq", "problem")

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
