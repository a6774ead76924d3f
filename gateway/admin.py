from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join

from audit.models import ActorType
from plumbing.admin import ReadOnlyAdminMixin

from . import pins
from .characters import shown_name
from .models import GatedCall, PinnedTool, ToolPolicy, Upstream


class ToolPolicyInline(admin.TabularInline):
    model = ToolPolicy
    fields = ("tool", "policy", "editable", "title", "redact", "money")
    extra = 1


@admin.register(Upstream)
class UpstreamAdmin(admin.ModelAdmin):
    list_display = ("name", "target", "default_policy", "enabled", "last_checked_at", "last_error")
    search_fields = ("name", "url")
    readonly_fields = ("pinned_at", "tools_refreshed_at", "last_checked_at", "last_error")
    inlines = [ToolPolicyInline]
    fieldsets = (
        (None, {"fields": ("name", "enabled", "default_policy")}),
        (
            "Upstream (a URL or a command; write secrets as ${VAR}, read from the environment)",
            {"fields": ("url", "headers", "command", "env")},
        ),
        (
            "State",
            {"fields": ("pinned_at", "tools_refreshed_at", "last_checked_at", "last_error")},
        ),
    )


class HeldFilter(admin.SimpleListFilter):
    title = "changed upstream"
    parameter_name = "held"

    def lookups(self, request, model_admin):
        return [("yes", "held for review"), ("no", "as pinned")]

    def queryset(self, request, queryset):
        if self.value() == "yes":
            return queryset.exclude(pending_sha256="")
        if self.value() == "no":
            return queryset.filter(pending_sha256="")
        return queryset


@admin.register(PinnedTool)
class PinnedToolAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """Pinned definitions; a held change is reviewed beside its diff and accepted with a button."""

    list_display = ("name", "upstream", "state", "pinned", "pinned_by", "pending_since")
    list_filter = (HeldFilter, "upstream")
    search_fields = ("tool",)
    fields = (
        "upstream",
        "name",
        "sha256",
        "pinned_at",
        "pinned_by",
        "pending_sha256",
        "pending_since",
        "review",
        "definition",
    )
    readonly_fields = fields

    @admin.display(description="tool", ordering="tool")
    def name(self, obj: PinnedTool) -> str:
        """Escaped: a name with an invisible or look-alike character never prints as another."""
        return shown_name(obj.tool)

    @admin.display(description="state")
    def state(self, obj: PinnedTool) -> str:
        if not obj.held:
            return "pinned"
        state = "CHANGED upstream: held" if obj.sha256 else "NEW upstream: held until accepted"
        return state + "".join(f"; {warning}" for warning in self.warnings(obj))

    @staticmethod
    def warnings(obj: PinnedTool) -> list[str]:
        like, unclear = pins.warnings(obj)
        found = [f"looks like `{like}`"] if like else []
        if unclear:
            found.append(f"its text holds {', '.join(unclear)}, shown as \\u{{...}}")
        return found

    @admin.display(description="pinned sha256")
    def pinned(self, obj: PinnedTool) -> str:
        return obj.sha256[:12] or "-"

    @admin.display(description="held change")
    def review(self, obj: PinnedTool) -> str:
        if not obj.held:
            return "-"
        url = reverse("admin:gateway_pinnedtool_accept", args=[obj.pk])
        return format_html(
            '{}<pre class="impri-diff">{}</pre><a class="button" href="{}">Review and accept</a>',
            format_html_join("", '<p class="errornote">{}</p>', ((w,) for w in self.warnings(obj))),
            pins.diff(obj.definition, obj.pending_definition),
            url,
        )

    def get_urls(self):
        accept = self.admin_site.admin_view(self.accept_view)
        return [
            path("<int:pk>/accept/", accept, name="gateway_pinnedtool_accept"),
            *super().get_urls(),
        ]

    def accept_view(self, request, pk: int):
        """The diff and the button: accepting pins exactly the definition shown (its hash)."""
        if not request.user.has_perm("gateway.accept_change"):
            raise PermissionDenied("accepting a changed tool needs gateway.accept_change")
        pin = get_object_or_404(PinnedTool.objects.select_related("upstream"), pk=pk)
        back = reverse("admin:gateway_pinnedtool_change", args=[pin.pk])
        if request.method == "POST":
            try:
                accepted = pins.accept(
                    pin.upstream.name,
                    [pin.tool],
                    by=f"admin:{request.user.get_username()}",
                    actor_type=ActorType.SYSTEM,
                    actor_ref=f"user:{request.user.pk}",
                    expect_sha256=request.POST.get("sha256", ""),
                )
            except pins.NothingToAccept as exc:
                messages.error(request, str(exc))
                return HttpResponseRedirect(back)
            for entry in accepted:
                messages.success(
                    request,
                    f"Accepted {entry['gateway']}.{shown_name(entry['tool'])} at {entry['sha256']}: agents "
                    "see this definition now.",
                )
            return HttpResponseRedirect(back)
        context = {
            **self.admin_site.each_context(request),
            "title": f"Accept the change of {pin.upstream.name}.{shown_name(pin.tool)}",
            "pin": pin,
            "name": shown_name(pin.tool),
            "warnings": self.warnings(pin) if pin.held else [],
            "diff": pins.diff(pin.definition, pin.pending_definition) if pin.held else "",
            "opts": self.model._meta,
        }
        return TemplateResponse(request, "admin/gateway/pinnedtool/accept.html", context)


@admin.register(GatedCall)
class GatedCallAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ("action", "gateway", "tool", "agent", "upstream_called_at", "delivered_at")
    list_filter = ("gateway",)
    readonly_fields = [f.name for f in GatedCall._meta.fields]
    allow_delete = True  # an operator may clear these by hand
