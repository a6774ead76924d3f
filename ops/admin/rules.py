"""Admin pages for the rules: rules edited as YAML, a dry run and a backtest against past
actions (``approvals.backtest_history``), the rule sets' versions and the budget counters."""

from __future__ import annotations

import difflib
from datetime import timedelta

import yaml
from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.http import HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone

from approvals.backtest_history import past_action_views as past_actions
from plumbing import strict_json
from plumbing.admin import ReadOnlyAdminMixin
from rules import engine, services
from rules.backtest import AMOUNT_PATH, backtest, dry_run, parse_since
from rules.models import BudgetCounter, Rule, RuleSet, RuleSetVersion


def dump_yaml(value) -> str:
    return yaml.safe_dump(value, sort_keys=False, allow_unicode=True, default_flow_style=None)


class YAMLField(forms.CharField):
    """A JSON object edited as YAML (as docs/rules.md writes rules): parsed safely, a mapping only."""

    widget = forms.Textarea(attrs={"rows": 14, "cols": 90, "class": "vLargeTextField"})

    def prepare_value(self, value):
        if isinstance(value, dict):
            return dump_yaml(value) if value else ""
        return value

    def to_python(self, value):
        text = super().to_python(value)
        if not text.strip():
            return {}
        try:
            loaded = strict_json.load_yaml(text)
        except yaml.YAMLError as exc:
            raise forms.ValidationError(
                f"not YAML: {str(exc).replace(chr(10), ' ')}", code="invalid"
            ) from None
        if not isinstance(loaded, dict):
            raise forms.ValidationError("must be a YAML mapping (kind, when, then, …)")
        return loaded

    def has_changed(self, initial, data):
        try:
            return self.to_python(data) != (initial or {})
        except forms.ValidationError:
            return True


class RuleForm(forms.ModelForm):
    definition = YAMLField(
        label="Definition (YAML)",
        help_text="Everything but the name and order, e.g. kind: payment.refund, "
        "when: {path: payload.amount_cents, lte: 5000}, then: auto_approve. "
        "Checked by the rules engine before it is saved.",
    )

    class Meta:
        model = Rule
        fields = ("position", "name", "enabled", "definition")


@admin.register(Rule)
class RuleAdmin(admin.ModelAdmin):
    """Ordered rules; saving validates the definition (Rule.clean) and bumps the rule-set version."""

    form = RuleForm
    list_display = ("position", "name", "enabled", "summary", "updated_at")
    list_display_links = ("name",)
    list_editable = ("position", "enabled")
    fields = ("position", "name", "enabled", "definition", "updated_at")
    readonly_fields = ("updated_at",)
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
            ),
            path("yaml/", self.admin_site.admin_view(self.yaml_view), name="rules_rule_yaml"),
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
            parsed = form.cleaned_data["parsed_file"]
            if form.cleaned_data["action_json"]:
                output = dry_run(parsed.rules, form.cleaned_data["action_json"], parsed.kinds)
            else:
                since = form.cleaned_data["since_at"]
                report = backtest(parsed.rules, past_actions(since), since, kinds=parsed.kinds)
                output = report.as_text(AMOUNT_PATH)
        context = {
            **self.admin_site.each_context(request),
            "title": "Dry run and backtest",
            "form": form,
            "output": output,
            "opts": self.model._meta,
        }
        return TemplateResponse(request, "admin/rules/rule/dry_run.html", context)

    def yaml_view(self, request):
        """The whole rule set as YAML: edit, preview what changes, then save (one new version).

        Preview parses and validates the text and shows the diff, the rules
        added, removed and changed, and a replay of the last 7 days under the
        old and the new rules. Save is offered only from a preview, and refused
        if the rules changed since (another admin, an import).
        """
        if not self.has_change_permission(request):
            raise PermissionDenied
        version = _version()
        current = normalized(services.current_rules())
        form = RulesYAMLForm(request.POST or None, initial={"rules_yaml": current})
        context = {
            **self.admin_site.each_context(request),
            "title": "Edit rules as YAML",
            "form": form,
            "opts": self.model._meta,
            "version": version,
        }
        if request.method == "POST" and form.is_valid():
            parsed = form.cleaned_data["parsed_file"]
            rules = parsed.rules
            if request.POST.get("save") and form.cleaned_data["previewed_version"] == version:
                new = services.replace_rules(parsed, by=f"admin:{request.user.get_username()}")
                messages.success(request, f"Rules saved: version {new}, {len(rules)} rule(s).")
                return HttpResponseRedirect(reverse("admin:rules_rule_changelist"))
            if request.POST.get("save"):
                messages.error(
                    request,
                    f"The rules changed since your preview (now version {version}): "
                    "nothing was saved. Review the new preview, then save.",
                )
            context["preview"] = preview(parsed)
        return TemplateResponse(request, "admin/rules/rule/yaml.html", context)


def _version() -> int:
    return RuleSet.objects.filter(pk=1).values_list("version", flat=True).first() or 0


# Keys in the order docs/rules.md writes them; the rest alphabetically. PostgreSQL's
# jsonb keeps its own key order, so both sides of a diff are put in this one.
KEY_ORDER = [
    "name", "kind", "agent", "when", "all", "any", "not", "path", "then", "reason", "group",
    "approvals_required", "expires_in_s", "escalate_after_s", "escalate_to", "edit_bounds",
    "budget", "per", "sum", "scope", "min", "max", "enabled",
    "schema", "money", "amount", "currency", "minor_units", "sign",
]  # fmt: skip


def _ordered(value):
    if isinstance(value, dict):
        rank = {key: i for i, key in enumerate(KEY_ORDER)}
        keys = sorted(value, key=lambda k: (rank.get(k, len(rank)), k))
        return {key: _ordered(value[key]) for key in keys}
    if isinstance(value, list):
        return [_ordered(item) for item in value]
    return value


def normalized(ruleset) -> str:
    """A rule set (its rules and kinds) as YAML in one canonical key order: the diff shows
    changes, not storage order."""
    specs = []
    for rule in ruleset.rules:
        spec = {k: v for k, v in rule.source.items() if k not in ("name", "enabled")}
        spec["name"] = rule.name
        if not rule.enabled:
            spec["enabled"] = False
        specs.append(_ordered(spec))
    document: dict = {"rules": specs}
    if ruleset.kinds:
        document["kinds"] = {
            name: _ordered(spec.as_dict()) for name, spec in sorted(ruleset.kinds.items())
        }
    return yaml.safe_dump(document, sort_keys=False, allow_unicode=True)


def _compared(rule: engine.Rule) -> tuple[dict, bool]:
    return {k: v for k, v in rule.source.items() if k != "enabled"}, rule.enabled


def preview(parsed: services.RuleFile) -> dict:
    loaded = services.current_rules()
    current, rules = loaded.rules, parsed.rules
    before = {r.name: _compared(r) for r in current}
    after = {r.name: _compared(r) for r in rules}
    old_text, new_text = normalized(loaded), normalized(parsed)
    since = timezone.now() - timedelta(days=7)
    return {
        "added": [name for name in after if name not in before],
        "removed": [name for name in before if name not in after],
        "changed": [n for n in after if n in before and after[n] != before[n]],
        "reordered": [n for n in after if n in before] != [n for n in before if n in after],
        "diff": "".join(
            difflib.unified_diff(
                old_text.splitlines(keepends=True),
                new_text.splitlines(keepends=True),
                "current rules",
                "your rules",
            )
        ),
        "unchanged": old_text == new_text,
        "kinds_changed": loaded.kinds != parsed.kinds,
        "backtest_before": backtest(
            current, past_actions(since), since, kinds=loaded.kinds
        ).as_text(AMOUNT_PATH),
        "backtest_after": backtest(rules, past_actions(since), since, kinds=parsed.kinds).as_text(
            AMOUNT_PATH
        ),
        "count": len(rules),
    }


class RulesYAMLForm(forms.Form):
    rules_yaml = forms.CharField(
        label="Rules (YAML)",
        widget=forms.Textarea(attrs={"rows": 28, "cols": 100, "class": "vLargeTextField"}),
    )
    previewed_version = forms.IntegerField(required=False, widget=forms.HiddenInput)

    def clean_rules_yaml(self):
        try:
            parsed = services.parse_file(self.cleaned_data["rules_yaml"])
            # A group named by no existing reviewer group strands actions: refused
            # here as at import (create it first, or import with --create-groups).
            services.check_groups(parsed.rules)
        except engine.RuleError as exc:
            raise forms.ValidationError(str(exc)) from None
        self.cleaned_data["parsed_file"] = parsed
        return self.cleaned_data["rules_yaml"]


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
            self.cleaned_data["parsed_file"] = services.parse_file(self.cleaned_data["rules_yaml"])
        except engine.RuleError as exc:
            raise forms.ValidationError(str(exc)) from None
        return self.cleaned_data["rules_yaml"]

    def clean_action_json(self):
        text = self.cleaned_data["action_json"].strip()
        if not text:
            return None
        try:
            action = strict_json.loads(text)
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
class RuleSetAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ("__str__", "version")


@admin.register(RuleSetVersion)
class RuleSetVersionAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """Every version of the rule set, read-only: its YAML and the diff from the one before."""

    list_display = ("version", "change", "changed_by", "created_at")
    readonly_fields = ("version", "change", "changed_by", "created_at", "yaml", "diff")


@admin.register(BudgetCounter)
class BudgetCounterAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ("rule", "scope", "window_start", "total")
    list_filter = ("rule",)
    allow_delete = True  # an operator may clear these by hand
