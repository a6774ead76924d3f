"""Admin pages for the core's models: agents and their keys, actions (read-only), and the user
page with reviewer tokens, single sign-on links and the second factor's reset."""

from __future__ import annotations

import json

from django import forms
from django.contrib import admin, messages
from django.contrib.auth.admin import UserAdmin
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.db.models import Exists, OuterRef
from django.template.response import TemplateResponse
from django.utils.cache import add_never_cache_headers
from django.utils.html import format_html
from django_otp.plugins.otp_totp.models import TOTPDevice

from approvals.hidden_text import reveal
from approvals.models import Action, Agent, ApiKey
from audit import log as audit
from audit.models import ActorType
from identity import keys
from identity.admin import SsoIdentityInline
from plumbing.admin import PastedIdMixin, ReadOnlyAdminMixin
from twofactor.services import remove_devices


class ApiKeyInline(admin.TabularInline):
    model = ApiKey
    fields = ("prefix", "label", "created_at", "last_used_at", "revoked_at")
    readonly_fields = fields
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False


ROTATE_SECRET = "_rotate_webhook_secret"


class AgentForm(forms.ModelForm):
    def clean_name(self):
        name = self.cleaned_data["name"]
        if name != self.initial.get("name"):  # a name from before the check may stay as it is
            try:
                keys.check_agent_name(name)
            except ValidationError as exc:
                raise ValidationError(f"The name {exc.messages[0]}") from None
        return name


@admin.register(Agent)
class AgentAdmin(admin.ModelAdmin):
    form = AgentForm
    list_display = ("name", "is_active", "created_at")
    search_fields = ("name",)
    filter_horizontal = ("owners",)
    inlines = [ApiKeyInline]
    actions = ["issue_key"]
    # The webhook secret is shown once (on creation or rotation), never kept on a page.
    exclude = ("webhook_secret",)
    readonly_fields = ("created_at", "webhook_secret_rotation")

    @admin.display(description="webhook secret")
    def webhook_secret_rotation(self, obj):
        if obj is None or obj.pk is None:
            return "Generated when the agent is saved, and shown once."
        return format_html(
            '<span>whsec_… (hidden)</span> <button type="submit" name="{}" class="button">'
            "Rotate the webhook secret (shown once)</button>",
            ROTATE_SECRET,
        )

    def save_model(self, request, obj, form, change):
        super().save_model(request, obj, form, change)
        by = f"admin:{request.user.get_username()}"
        if not change:
            secret = obj.webhook_secret
        elif ROTATE_SECRET in request.POST:
            secret = keys.rotate_webhook_secret(obj, by=by)
        else:
            return
        self.message_user(
            request,
            f"Webhook secret for {obj.name} (shown once; the old one no longer signs): {secret}",
            messages.WARNING,
        )

    def save_related(self, request, form, formsets, change):
        """Owners decide who may never approve an agent's actions: every change is audited."""
        agent = form.instance
        before = set(agent.owners.values_list("username", flat=True)) if change else set()
        super().save_related(request, form, formsets, change)
        after = set(agent.owners.values_list("username", flat=True))
        if before != after:
            audit.record(
                "agent.owners_changed",
                actor_type=ActorType.REVIEWER,
                actor_id=request.user.get_username(),
                data={
                    "agent": agent.name,
                    "added": sorted(after - before),
                    "removed": sorted(before - after),
                    "owners": sorted(after),
                },
            )

    @admin.action(description="Issue a new key (shown once)")
    def issue_key(self, request, queryset):
        for agent in queryset:
            _, raw = keys.create_agent_key(agent, by=f"admin:{request.user.get_username()}")
            self.message_user(
                request, f"New key for {agent.name} (shown once): {raw}", messages.WARNING
            )


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    list_display = (
        "prefix",
        "kind",
        "agent",
        "user",
        "label",
        "created_at",
        "last_used_at",
        "revoked_at",
    )
    list_filter = ("kind",)
    readonly_fields = (
        "kind",
        "agent",
        "user",
        "prefix",
        "created_at",
        "last_used_at",
        "revoked_at",
    )
    fields = readonly_fields + ("label",)
    actions = ["revoke"]

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    @admin.action(description="Revoke the selected keys")
    def revoke(self, request, queryset):
        for key in queryset:
            keys.revoke_key(key, by=f"admin:{request.user.get_username()}")
        self.message_user(request, f"Revoked {queryset.count()} key(s).")


def _json_display(name: str):
    """Agent JSON as escaped text with hidden characters shown, never Django's raw dump.

    Django's read-only JSON display writes the value as it is; one lone surrogate
    stored before push refused them would make the page unencodable (a 500).
    """

    @admin.display(description=name.replace("_", " "))
    def show(self, obj):
        text = json.dumps(getattr(obj, name), ensure_ascii=False, indent=2, sort_keys=True)
        return format_html("<pre>{}</pre>", reveal(text))

    return show


def _text_display(name: str):
    """Agent text escaped, with bidi controls and invisible characters shown as labels."""

    @admin.display(description=name.replace("_", " "), ordering=name)
    def show(self, obj):
        return format_html("<pre>{}</pre>", reveal(getattr(obj, name)))

    return show


ACTION_TEXT_FIELDS = ("title", "preview_body", "target_url", "callback_url", "note")
ACTION_JSON_FIELDS = (
    "payload",
    "original_payload",
    "context",
    "editable",
    "flags",
    "rule_trace",
    "edit_bounds",
    "result_detail",
)


@admin.register(Action)
class ActionAdmin(PastedIdMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
    """Read-only: every change to an action goes through approvals.services."""

    exclude = ACTION_TEXT_FIELDS + ACTION_JSON_FIELDS
    readonly_fields = tuple(f"{name}_shown" for name in ACTION_TEXT_FIELDS + ACTION_JSON_FIELDS)
    title_shown = _text_display("title")
    preview_body_shown = _text_display("preview_body")
    target_url_shown = _text_display("target_url")
    callback_url_shown = _text_display("callback_url")
    note_shown = _text_display("note")
    payload_shown = _json_display("payload")
    original_payload_shown = _json_display("original_payload")
    context_shown = _json_display("context")
    editable_shown = _json_display("editable")
    flags_shown = _json_display("flags")
    rule_trace_shown = _json_display("rule_trace")
    edit_bounds_shown = _json_display("edit_bounds")
    result_detail_shown = _json_display("result_detail")

    list_display = ("id", "kind", "title_shown", "agent", "status", "created_at", "expires_at")
    list_filter = ("status", "kind")
    search_fields = ("id", "title", "idempotency_key")
    list_select_related = ("agent",)


class ReviewerTokenInline(admin.TabularInline):
    model = ApiKey
    fk_name = "user"
    fields = ("prefix", "label", "is_service", "created_at", "last_used_at", "revoked_at")
    readonly_fields = fields
    extra = 0
    can_delete = False
    verbose_name = "reviewer token"
    verbose_name_plural = (
        "reviewer tokens (issue one with the user list's action; revoke under API keys)"
    )

    def has_add_permission(self, request, obj=None):
        return False


admin.site.unregister(User)


@admin.register(User)
class ReviewerAdmin(UserAdmin):
    """Django's user admin, plus reviewer tokens: issued here (shown once), listed, revoked under API keys."""

    inlines = [ReviewerTokenInline, SsoIdentityInline]
    actions = ["issue_reviewer_token", "reset_two_factor"]
    readonly_fields = ("last_login", "date_joined")
    list_display = (*UserAdmin.list_display, "two_factor")

    def get_queryset(self, request):

        enrolled = TOTPDevice.objects.filter(user=OuterRef("pk"), confirmed=True)
        return super().get_queryset(request).annotate(has_two_factor=Exists(enrolled))

    @admin.display(boolean=True, description="two-factor", ordering="has_two_factor")
    def two_factor(self, user) -> bool:
        return user.has_two_factor

    @admin.action(description="Issue a reviewer token (shown once)")
    def issue_reviewer_token(self, request, queryset):
        by = f"admin:{request.user.get_username()}"
        issued = []
        for user in queryset.filter(is_active=True).order_by("username"):
            key, raw = keys.create_reviewer_token(user, label="issued in admin", by=by)
            issued.append({"user": user, "prefix": key.prefix, "token": raw})
        skipped = queryset.filter(is_active=False).count()
        context = {
            **self.admin_site.each_context(request),
            "title": "Reviewer tokens issued",
            "issued": issued,
            "skipped": skipped,
            "opts": self.model._meta,
        }
        response = TemplateResponse(request, "admin/auth/user/tokens_issued.html", context)
        add_never_cache_headers(response)  # the one time a token is shown: never cached
        return response

    @admin.action(description="Reset two-factor (a lost phone: they enrol again)")
    def reset_two_factor(self, request, queryset):

        users = list(queryset.order_by("username"))
        removed = sum(remove_devices(user) for user in users)  # audited per device
        self.message_user(
            request,
            f"Two-factor reset for {len(users)} user(s); {removed} authenticator(s) removed. "
            "Their sessions must pass a code again, or enrol afresh when it is required.",
            messages.SUCCESS,
        )
