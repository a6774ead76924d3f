from django.contrib import admin

from .models import AuditEvent


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
