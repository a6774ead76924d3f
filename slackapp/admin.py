"""Admin: a Slack channel per reviewer group, explicit Slack member → reviewer links, and the
app's messages (read-only, like the other outbox rows)."""

from __future__ import annotations

from django.contrib import admin

from plumbing.admin import ReadOnlyAdminMixin

from .models import SlackChannel, SlackMessage, SlackUserLink


@admin.register(SlackChannel)
class SlackChannelAdmin(admin.ModelAdmin):
    list_display = ("group", "channel")
    search_fields = ("group__name", "channel")


@admin.register(SlackUserLink)
class SlackUserLinkAdmin(admin.ModelAdmin):
    list_display = ("slack_user_id", "user", "created_at")
    search_fields = ("slack_user_id", "user__username", "user__email")
    autocomplete_fields = ("user",)
    readonly_fields = ("created_at",)


@admin.register(SlackMessage)
class SlackMessageAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ("action", "channel", "ts", "delivered_at", "attempts", "gave_up_at")
    list_filter = ("channel",)
    search_fields = ("action__id", "ts")
    readonly_fields = [f.name for f in SlackMessage._meta.fields]
