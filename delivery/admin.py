"""Admin for the background outboxes: webhook deliveries (with every attempt) and notifications.

Deliveries and notifications are read-only records of what was sent; only a
group's notification settings are edited here. Django's admin autodiscovery registers
it, as it does ``ops.admin`` (the core's own models).
"""

from __future__ import annotations

from django import forms
from django.contrib import admin
from django.core.validators import validate_email
from django.utils import timezone

from approvals.models import (
    GroupNotificationSettings,
    Notification,
    WebhookAttempt,
    WebhookDelivery,
)
from plumbing import outbound
from plumbing.admin import PastedIdMixin, ReadOnlyAdminMixin


class OutcomeFilter(admin.SimpleListFilter):
    """Delivered, given up, or still trying: what an on-call lead asks first."""

    title = "outcome"
    parameter_name = "outcome"

    def lookups(self, request, model_admin):
        return [
            ("delivered", "delivered"),
            ("gave_up", "gave up"),
            ("retrying", "still trying"),
        ]

    def queryset(self, request, queryset):
        if self.value() == "delivered":
            return queryset.filter(delivered_at__isnull=False)
        if self.value() == "gave_up":
            return queryset.filter(gave_up_at__isnull=False)
        if self.value() == "retrying":
            return queryset.filter(delivered_at__isnull=True, gave_up_at__isnull=True)
        return queryset


def outcome(obj) -> str:
    if obj.delivered_at:
        return "delivered"
    if obj.gave_up_at:
        return "gave up"
    if obj.locked_until and obj.locked_until > timezone.now():
        return "sending"
    return "retrying" if obj.attempts else "queued"


class WebhookAttemptInline(ReadOnlyAdminMixin, admin.TabularInline):
    model = WebhookAttempt
    fields = ("at", "status_code", "error", "duration_ms")
    readonly_fields = fields
    extra = 0
    can_delete = False
    ordering = ("at", "pk")


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(PastedIdMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = (
        "id",
        "event",
        "action",
        "url",
        "status",
        "attempts",
        "created_at",
        "next_attempt_at",
        "delivered_at",
        "gave_up_at",
    )
    list_filter = (OutcomeFilter, "event")
    search_fields = ("id", "action__id", "url")
    date_hierarchy = "created_at"
    list_select_related = ("action",)
    readonly_fields = (
        "id",
        "action",
        "event",
        "url",
        "body",
        "created_at",
        "next_attempt_at",
        "attempts",
        "locked_until",
        "delivered_at",
        "gave_up_at",
        "last_error",
    )
    fields = readonly_fields
    inlines = [WebhookAttemptInline]

    @admin.display(description="status")
    def status(self, obj):
        return outcome(obj)


@admin.register(Notification)
class NotificationAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = (
        "id",
        "kind",
        "channel",
        "group",
        "action",
        "status",
        "attempts",
        "created_at",
        "delivered_at",
        "gave_up_at",
        "last_error",
    )
    list_filter = (OutcomeFilter, "kind", "channel", "group")
    search_fields = ("action__id",)
    date_hierarchy = "created_at"
    list_select_related = ("action", "group")
    readonly_fields = (
        "action",
        "group",
        "kind",
        "channel",
        "created_at",
        "next_attempt_at",
        "attempts",
        "locked_until",
        "delivered_at",
        "gave_up_at",
        "last_error",
    )
    fields = readonly_fields

    @admin.display(description="status")
    def status(self, obj):
        return outcome(obj)


class GroupNotificationSettingsForm(forms.ModelForm):
    slack_webhook_url = forms.URLField(
        required=False,
        max_length=500,
        assume_scheme="https",
        help_text="A Slack incoming-webhook URL (https://hooks.slack.com/services/…).",
    )

    class Meta:
        model = GroupNotificationSettings
        fields = ("group", "email_enabled", "extra_emails", "slack_webhook_url", "reminder_every_s")
        help_texts = {"extra_emails": 'A JSON list, e.g. ["support-leads@example.com"].'}

    def clean_slack_webhook_url(self):
        url = self.cleaned_data.get("slack_webhook_url") or ""
        if url and not url.lower().startswith(("https://", "http://")):
            raise forms.ValidationError("Enter an http(s) URL.")
        if url:
            try:
                outbound.check_url(url)
            except outbound.Refused as exc:
                raise forms.ValidationError(f"Impri will not send to this URL: {exc}.") from None
        return url

    def clean_extra_emails(self):
        value = self.cleaned_data.get("extra_emails") or []
        if not isinstance(value, list):
            raise forms.ValidationError("Enter a list of email addresses.")
        for address in value:
            if not isinstance(address, str):
                raise forms.ValidationError("Every entry must be an email address.")
            validate_email(address)
        return value


@admin.register(GroupNotificationSettings)
class GroupNotificationSettingsAdmin(admin.ModelAdmin):
    form = GroupNotificationSettingsForm
    list_display = ("group", "email_enabled", "slack", "reminder_every_s")
    list_select_related = ("group",)

    @admin.display(description="Slack", boolean=True)
    def slack(self, obj):
        return bool(obj.slack_webhook_url)
