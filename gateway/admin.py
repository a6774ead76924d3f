from django.contrib import admin

from impri.admin_site import ReadOnlyAdminMixin

from .models import GatedCall, ToolPolicy, Upstream


class ToolPolicyInline(admin.TabularInline):
    model = ToolPolicy
    fields = ("tool", "policy", "editable", "title", "redact")
    extra = 1


@admin.register(Upstream)
class UpstreamAdmin(admin.ModelAdmin):
    list_display = ("name", "target", "default_policy", "enabled", "last_checked_at", "last_error")
    search_fields = ("name", "url")
    readonly_fields = ("tools_refreshed_at", "last_checked_at", "last_error")
    inlines = [ToolPolicyInline]
    fieldsets = (
        (None, {"fields": ("name", "enabled", "default_policy")}),
        (
            "Upstream (a URL or a command; write secrets as ${VAR}, read from the environment)",
            {"fields": ("url", "headers", "command", "env")},
        ),
        ("State", {"fields": ("tools_refreshed_at", "last_checked_at", "last_error")}),
    )


@admin.register(GatedCall)
class GatedCallAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ("action", "gateway", "tool", "agent", "upstream_called_at", "delivered_at")
    list_filter = ("gateway",)
    readonly_fields = [f.name for f in GatedCall._meta.fields]
    allow_delete = True  # an operator may clear these by hand
