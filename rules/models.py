from __future__ import annotations

from django.contrib.auth.models import Group
from django.core.exceptions import ValidationError
from django.db import models

from . import engine, kinds


class RuleQuerySet(models.QuerySet):
    def in_order(self):
        return self.order_by("position", "pk")


class Rule(models.Model):
    """One rule of the ordered set; ``definition`` holds everything but the name and order."""

    position = models.PositiveIntegerField(
        default=0, db_index=True, help_text="Lower runs first; first match wins."
    )
    name = models.CharField(max_length=200, unique=True)
    enabled = models.BooleanField(default=True)
    definition = models.JSONField(
        default=dict,
        help_text='e.g. {"kind": "payment.refund", "when": {"path": "payload.amount_cents", "lte": 5000}, '
        '"then": "auto_approve"}',
    )
    updated_at = models.DateTimeField(auto_now=True)

    objects = RuleQuerySet.as_manager()

    class Meta:
        ordering = ["position", "pk"]

    def __str__(self) -> str:
        return self.name

    def as_spec(self) -> dict:
        spec = {"name": self.name, **self.definition}
        if not self.enabled:
            spec["enabled"] = False
        return spec

    def parsed(self) -> engine.Rule:
        return engine.parse_rule(self.as_spec(), self.position)

    def clean(self):
        if "name" in self.definition or "enabled" in self.definition:
            raise ValidationError(
                {
                    "definition": "name and enabled are fields of their own, not part of the definition"
                }
            )
        try:
            rule = self.parsed()
            declared = RuleSet.objects.filter(pk=1).values_list("kinds", flat=True).first()
            kinds.check_signed_bounds([rule], kinds.parse_kinds(declared or {}))
        except engine.RuleError as exc:
            raise ValidationError({"definition": str(exc)}) from exc
        named = [name for name in (rule.group, rule.escalate_to) if name]
        known = set(Group.objects.filter(name__in=named).values_list("name", flat=True))
        unknown = [name for name in named if name not in known]
        if unknown:
            raise ValidationError(
                {
                    "definition": f"no reviewer group is named {unknown[0]!r}: create the group "
                    "first (Authentication and Authorization → Groups), or fix the name"
                }
            )


class RuleSet(models.Model):
    """The version of the rule set; every change bumps it and every decision records it."""

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    version = models.PositiveIntegerField(default=0)
    # A fresh random value with every bump: what a process's cache of parsed rules
    # is keyed on, so a version number reused after a rollback is never mistaken.
    revision = models.CharField(max_length=32, default="", editable=False)
    # The rules file's ``kinds:`` section as given (rules.kinds); the defaults are not stored.
    kinds = models.JSONField(default=dict, blank=True)

    def __str__(self) -> str:
        return f"rule set v{self.version}"


class BudgetCounter(models.Model):
    """What a budgeted rule has auto-approved in one window for one scope.

    Reservations are a single conditional UPDATE (``total + amount <= max``),
    so concurrent pushes can never approve past the cap.
    """

    rule = models.CharField(max_length=200)
    scope = models.CharField(max_length=300)
    window_start = models.DateTimeField()
    total = models.DecimalField(max_digits=30, decimal_places=6, default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["rule", "scope", "window_start"], name="budget_one_counter_per_window"
            )
        ]

    def __str__(self) -> str:
        return f"{self.rule} / {self.scope} from {self.window_start:%Y-%m-%d %H:%M}: {self.total}"


class RuleSetVersion(models.Model):
    """The rule set as it stood at one version, and how it differed from the one before.

    Written in the transaction that bumps the version; the ``rules.changed``
    audit event carries the SHA-256 of ``yaml``, so a stored version that was
    altered afterwards no longer matches the hash-chained record.
    """

    version = models.PositiveIntegerField(unique=True)
    yaml = models.TextField()
    diff = models.TextField(blank=True)
    changed_by = models.CharField(max_length=200, blank=True)
    change = models.CharField(max_length=40, blank=True)
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["-version"]

    def __str__(self) -> str:
        return f"rule set v{self.version}"
