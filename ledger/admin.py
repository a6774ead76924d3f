"""Admin: movements, settlements, processor events and notices, read-only (the ledger's
services change them; a reviewer explains an exception from the inbox)."""

from __future__ import annotations

from django.contrib import admin

from plumbing.admin import ReadOnlyAdminMixin

from .models import Movement, Notice, ProcessorEvent, Settlement


@admin.register(Movement)
class MovementAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = (
        "external_id",
        "source",
        "kind",
        "amount_minor",
        "currency",
        "state",
        "action",
        "occurred_at",
    )
    list_filter = ("state", "source", "kind", "currency")
    search_fields = ("external_id", "reference", "action__id")
    readonly_fields = [f.name for f in Movement._meta.fields]


@admin.register(Settlement)
class SettlementAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ("action", "state", "computed_state", "explained_by", "updated_at")
    list_filter = ("state",)
    search_fields = ("action__id",)
    readonly_fields = [f.name for f in Settlement._meta.fields]


@admin.register(ProcessorEvent)
class ProcessorEventAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ("event_id", "source", "type", "received_at")
    search_fields = ("event_id",)
    readonly_fields = [f.name for f in ProcessorEvent._meta.fields]


@admin.register(Notice)
class NoticeAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ("key", "channel", "created_at", "delivered_at", "attempts", "gave_up_at")
    list_filter = ("channel",)
    readonly_fields = [f.name for f in Notice._meta.fields]
