"""Admin: reviewers' push devices (an operator may remove one, e.g. a lost phone's) and the
push outbox (read-only, like the other outbox rows)."""

from __future__ import annotations

from django.contrib import admin

from plumbing.admin import ReadOnlyAdminMixin

from .models import PushDelivery, PushSubscription


@admin.register(PushSubscription)
class PushSubscriptionAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    allow_delete = True  # the reviewer stops getting pushes on that device
    list_display = ("user", "device", "created_at", "last_push_at")
    search_fields = ("user__username", "device")
    # The endpoint is a capability URL and the keys are the browser's: not shown.
    fields = ("user", "device", "created_at", "last_push_at")
    readonly_fields = fields


@admin.register(PushDelivery)
class PushDeliveryAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = (
        "action",
        "kind",
        "subscription",
        "created_at",
        "delivered_at",
        "attempts",
        "gave_up_at",
    )
    list_filter = ("kind",)
    search_fields = ("action__id",)
    readonly_fields = [f.name for f in PushDelivery._meta.fields]
