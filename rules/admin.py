from __future__ import annotations

import json

from django import forms
from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.template.response import TemplateResponse
from django.urls import path

from . import engine, services
from .backtest import backtest, dry_run, parse_since
from .models import BudgetCounter, Rule, RuleSet, RuleSetVersion


@admin.register(Rule)
class RuleAdmin(admin.ModelAdmin):
    """Ordered rules; saving validates the definition (Rule.clean) and bumps the rule-set version."""

    list_display = ("position", "name", "enabled", "summary", "updated_at")
    list_display_links = ("name",)
    list_editable = ("position", "enabled")
    fields = ("position", "name", "enabled", "definition")
    change_list_template = "admin/rules/rule/change_list.html"

    @admin.display(description="does")
    def summary(self, rule: Rule) -> str:
        spec = rule.definition
        return f"{spec.get('kind', '*')} → {spec.get('then', '?')}" + (
            f" ({spec['group']})" if spec.get("group") else ""
        )

    def save_model(self, request, obj, form, change):
        with transaction.atomic():
            super().save_model(request, obj, form, change)
            services.bump_version(
                by=request.user.get_username(), change="saved", detail={"rule": obj.name}
            )

    def delete_model(self, request, obj):
        with transaction.atomic():
            super().delete_model(request, obj)
            services.bump_version(
                by=request.user.get_username(), change="deleted", detail={"rule": obj.name}
            )

    def delete_queryset(self, request, queryset):
        with transaction.atomic():
            names = list(queryset.values_list("name", flat=True))
            super().delete_queryset(request, queryset)
            services.bump_version(
                by=request.user.get_username(), change="deleted", detail={"rules": names}
            )

    def get_urls(self):
        custom = [
            path(
                "dry-run/", self.admin_site.admin_view(self.dry_run_view), name="rules_rule_dry_run"
            )
        ]
        return custom + super().get_urls()

    def dry_run_view(self, request):
        # It prints every threshold and past actions' amounts: the rules permissions, not just staff.
        if not self.has_view_permission(request) or (
            request.method == "POST" and not self.has_change_permission(request)
        ):
            raise PermissionDenied("the dry run needs the permissions to view and change rules")
        form = DryRunForm(
            request.POST or None, initial={"rules_yaml": services.export_yaml(), "since": "30d"}
        )
        output = ""
        if request.method == "POST" and form.is_valid():
            rules = form.cleaned_data["parsed_rules"]
            if form.cleaned_data["action_json"]:
                output = dry_run(rules, form.cleaned_data["action_json"])
            else:
                since = form.cleaned_data["since_at"]
                output = backtest(rules, since).as_text("payload.amount_cents")
        context = {
            **self.admin_site.each_context(request),
            "title": "Dry run and backtest",
            "form": form,
            "output": output,
            "opts": self.model._meta,
        }
        return TemplateResponse(request, "admin/rules/rule/dry_run.html", context)


class DryRunForm(forms.Form):
    rules_yaml = forms.CharField(
        label="Candidate rules (YAML)", widget=forms.Textarea(attrs={"rows": 20, "cols": 100})
    )
    action_json = forms.CharField(
        label="One action (JSON: kind, agent, payload, flags, context) — leave empty to backtest past actions",
        required=False,
        widget=forms.Textarea(attrs={"rows": 6, "cols": 100}),
    )
    since = forms.CharField(label="Backtest since (30d, 12h, 90m or all)", initial="30d")

    def clean_rules_yaml(self):
        try:
            self.cleaned_data["parsed_rules"] = services.parse_yaml(self.cleaned_data["rules_yaml"])
        except engine.RuleError as exc:
            raise forms.ValidationError(str(exc)) from None
        return self.cleaned_data["rules_yaml"]

    def clean_action_json(self):
        text = self.cleaned_data["action_json"].strip()
        if not text:
            return None
        try:
            action = json.loads(text)
        except ValueError as exc:
            raise forms.ValidationError(f"not JSON: {exc}") from None
        if not isinstance(action, dict):
            raise forms.ValidationError("must be a JSON object")
        return {"flags": [], "context": {}, "payload": {}, **action}

    def clean_since(self):
        try:
            self.cleaned_data["since_at"] = parse_since(self.cleaned_data["since"])
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None
        return self.cleaned_data["since"]


@admin.register(RuleSet)
class RuleSetAdmin(admin.ModelAdmin):
    list_display = ("__str__", "version")

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(RuleSetVersion)
class RuleSetVersionAdmin(admin.ModelAdmin):
    """Every version of the rule set, read-only: its YAML and the diff from the one before."""

    list_display = ("version", "change", "changed_by", "created_at")
    readonly_fields = ("version", "change", "changed_by", "created_at", "yaml", "diff")

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(BudgetCounter)
class BudgetCounterAdmin(admin.ModelAdmin):
    list_display = ("rule", "scope", "window_start", "total")
    list_filter = ("rule",)

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False
