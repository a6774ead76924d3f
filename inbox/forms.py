"""Parsing what reviewers send: queue filters and the two decision forms.

Forms only parse and type the input; whether an edit is allowed, in bounds, or
still possible is for ``approvals.services.decide`` to say (its errors come
back onto the form's fields).
"""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal, InvalidOperation

from django import forms
from django.contrib.auth.models import Group

from approvals import services
from approvals.errors import InvalidInput
from approvals.models import Action, ActionStatus, RejectReason
from approvals.schemas import resolve_path
from approvals.services.selectors import AGES, Filters
from rules.money import MAX_EXACT_INTEGER, SYMBOLS

from .dashboard import MAX_DAYS
from .presenters import money_fields

SORTS = [("newest", "Newest first"), ("urgent", "Most urgent first")]
AGE_CHOICES = [
    ("", "Any age"),
    ("lt1h", "Under 1 hour"),
    ("1h-24h", "1 to 24 hours"),
    ("gt24h", "Over 24 hours"),
]
HISTORY_STATUSES = [("", "Any outcome")] + [
    (s, s.capitalize()) for s in ActionStatus.values if s != ActionStatus.PENDING
]
# Reason codes travel to the agent beside the note (decision "reason").
REJECT_REASONS = [("", "No reason code"), *RejectReason.choices]
# In whole currency units: cents stay within JSON's safe integers (approvals.schemas).
MAX_AMOUNT = Decimal(10**13)
assert set(AGES) == {value for value, _ in AGE_CHOICES if value}


class QueueFilterForm(forms.Form):
    q = forms.CharField(required=False, max_length=200, label="Search")
    kind = forms.CharField(required=False, max_length=100)
    agent = forms.CharField(required=False, max_length=100)
    # Bounded so a hostile number is an invalid filter, not a database overflow.
    group = forms.IntegerField(required=False, min_value=1, max_value=2**31 - 1)
    age = forms.ChoiceField(required=False, choices=AGE_CHOICES)
    amount_min = forms.DecimalField(
        required=False, min_value=0, max_value=MAX_AMOUNT, decimal_places=2, label="Amount from"
    )
    amount_max = forms.DecimalField(
        required=False, min_value=0, max_value=MAX_AMOUNT, decimal_places=2, label="Amount to"
    )
    sort = forms.ChoiceField(required=False, choices=SORTS)
    status = forms.ChoiceField(required=False, choices=HISTORY_STATUSES)
    mine = forms.BooleanField(required=False, label="Decided by me")
    after = forms.CharField(required=False, max_length=500)

    def __init__(self, *args, user, **kwargs):
        super().__init__(*args, **kwargs)
        self.groups = (Group.objects.all() if user.is_superuser else user.groups.all()).order_by(
            "name"
        )

    def filters(self) -> Filters:
        """The valid part of the query string: a bad value drops its filter, not the page."""
        data = self.cleaned_data if self.is_bound else {}
        cents = {
            name: int(value * 100) if isinstance(value, Decimal) else None
            for name, value in ((n, data.get(n)) for n in ("amount_min", "amount_max"))
        }
        return Filters(
            q=(data.get("q") or "").strip(),
            kind=data.get("kind") or "",
            agent=data.get("agent") or "",
            group=data.get("group"),
            age=data.get("age") or "",
            status=data.get("status") or "",
            mine=bool(data.get("mine")),
            **cents,
        )

    @property
    def order(self) -> str:
        return (self.cleaned_data.get("sort") if self.is_bound else None) or "newest"

    @property
    def cursor(self) -> str | None:
        return (self.cleaned_data.get("after") if self.is_bound else None) or None


def _edit_field(original) -> forms.Field:
    """An input typed like the original value, so an edit keeps its JSON type."""
    if isinstance(original, bool):
        return forms.BooleanField(required=False)
    if isinstance(original, int):
        return forms.IntegerField()
    if isinstance(original, float):
        return forms.FloatField()
    return forms.CharField(required=False, strip=False, max_length=10_000)


# The field a reviewer types an amount into, in the currency's major units ("84.00"), beside
# the payload's own field in minor units (8400), which stays in the form, hidden.
MAJOR = "~major"
_MAJOR_TEXT = re.compile(r"-?[0-9]+(?:\.[0-9]+)?")


class MajorUnitsField(forms.CharField):
    """An amount typed in major units (``84.00``, ``1,200.50``, ``$84``), read into minor units."""

    def __init__(self, exponent: int, **kwargs):
        super().__init__(required=False, max_length=40, **kwargs)
        self.exponent = exponent

    def to_minor(self, text: str) -> int:
        plain = "".join(c for c in text if c not in ", " and c not in SYMBOLS.values())
        if not _MAJOR_TEXT.fullmatch(plain):
            raise forms.ValidationError(
                f"Enter an amount like {format(Decimal(8400).scaleb(-self.exponent), f'.{self.exponent}f')}."
            )
        try:
            scaled = Decimal(plain).scaleb(self.exponent)
        except InvalidOperation:
            raise forms.ValidationError("Enter an amount.") from None
        if scaled != scaled.to_integral_value():
            places = f"{self.exponent} decimal place{'s' if self.exponent != 1 else ''}"
            raise forms.ValidationError(f"This currency has {places} at most.")
        minor = int(scaled)
        if abs(minor) > MAX_EXACT_INTEGER:
            raise forms.ValidationError("That amount is too large.")
        return minor


class ApproveForm(forms.Form):
    verdict = forms.CharField(widget=forms.HiddenInput, initial="approve")
    # The payload this page showed: the approval names it, so a figure changed
    # by another reviewer since is refused instead of approved unseen.
    payload_sha256 = forms.RegexField(
        regex=r"^[0-9a-f]{64}$", widget=forms.HiddenInput, required=False
    )
    note = forms.CharField(
        required=False, max_length=5000, widget=forms.Textarea(attrs={"rows": 2}), label="Note"
    )

    def __init__(self, action: Action, *args, **kwargs):
        kwargs.setdefault("prefix", "approve")
        super().__init__(*args, **kwargs)
        self.action = action
        self.fields["payload_sha256"].initial = services.payload_sha256(action.payload)
        self.current = {}
        self.majors: dict[str, str] = {}  # money path -> the name of its major-units field

        money = money_fields(action)
        for path in action.editable:
            _, original = resolve_path({"payload": action.original_payload}, path)
            _, current = resolve_path({"payload": action.payload}, path)
            self.current[path] = current
            field = _edit_field(original)
            field.label = path
            field.initial = current
            field.widget.attrs["aria-describedby"] = f"id_{self.add_prefix(path)}-hint"
            self.fields[path] = field
            if path in money and isinstance(field, forms.IntegerField):
                self._add_major(path, field, money[path])

    def _add_major(self, path: str, minor: forms.Field, money) -> None:
        """The reviewer types major units; the minor-units field stays, hidden (the plain POST API)."""
        shown_id = f"id_{self.add_prefix(path)}"
        major = MajorUnitsField(money.exponent, label=path)
        major.initial = format(money.major, f".{money.exponent}f")
        major.widget.attrs.update(
            {
                "id": shown_id,
                "inputmode": "decimal",
                "autocomplete": "off",
                "aria-describedby": f"{shown_id}-hint",
                "data-major-units": str(money.exponent),
            }
        )
        minor.required = False
        minor.widget = forms.HiddenInput(attrs={"id": f"{shown_id}-minor"})
        posted = self.data.get(self.add_prefix(path)) if self.is_bound else None
        if posted is not None and self.add_prefix(path + MAJOR) not in self.data:
            # Minor units posted alone (a script, an older page): shown back in major units.
            try:
                shown = format(Decimal(int(posted)).scaleb(-money.exponent), f".{money.exponent}f")
            except (ValueError, TypeError):
                shown = None
            if shown is not None:
                self.data = self.data.copy()
                self.data[self.add_prefix(path + MAJOR)] = shown
        self.fields[path + MAJOR] = major
        self.majors[path] = path + MAJOR

    def add_error(self, field, error):
        # An error about a money path shows where the reviewer typed it: the major-units field.
        super().add_error(self.majors.get(field, field) if field else field, error)

    def clean(self):
        cleaned = super().clean()
        for path, name in self.majors.items():
            text = (cleaned.get(name) or "").strip()
            if text:
                try:
                    cleaned[path] = self.fields[name].to_minor(text)
                except forms.ValidationError as error:
                    self.add_error(name, error)
                    cleaned.pop(path, None)
            elif cleaned.get(path) is None and name not in self.errors:
                self.add_error(name, "Enter an amount.")
        return cleaned

    def minor_fields(self):
        """The hidden minor-units fields of the amounts typed in major units."""
        return [self[path] for path in self.majors]

    def edit_fields(self):
        """What the reviewer edits: an amount's major-units field in place of its minor units."""
        return [self[self.majors.get(path, path)] for path in self.action.editable]

    def edits(self) -> dict:
        """Only the paths the reviewer changed from what the page showed them."""
        return {
            path: self.cleaned_data[path]
            for path, shown in self.current.items()
            if path in self.cleaned_data and self.cleaned_data.get(path) != shown
        }

    def note_text(self) -> str:
        return self.cleaned_data["note"]

    def reason_code(self) -> str:
        return ""

    def seen_sha256(self) -> str | None:
        return self.cleaned_data.get("payload_sha256") or None


class RejectForm(forms.Form):
    verdict = forms.CharField(widget=forms.HiddenInput, initial="reject")
    reason = forms.ChoiceField(required=False, choices=REJECT_REASONS, label="Reason code")
    note = forms.CharField(
        required=False,
        max_length=4900,
        widget=forms.Textarea(attrs={"rows": 2}),
        label="Note to the agent",
    )

    def __init__(self, action: Action, *args, **kwargs):
        kwargs.setdefault("prefix", "reject")
        super().__init__(*args, **kwargs)
        self.action = action

    def edits(self) -> dict:
        return {}

    def seen_sha256(self) -> None:
        return None

    def note_text(self) -> str:
        return self.cleaned_data["note"]

    def reason_code(self) -> str:
        return self.cleaned_data["reason"]


class ChangesForm(forms.Form):
    """Request changes: the action settles, not approved, with this message to the agent."""

    verdict = forms.CharField(widget=forms.HiddenInput, initial="changes")
    # Required here too, so an empty message never reaches the service; it says the same.
    note = forms.CharField(
        max_length=4900,
        widget=forms.Textarea(attrs={"rows": 2}),
        label="What should change",
    )

    def __init__(self, action: Action, *args, **kwargs):
        kwargs.setdefault("prefix", "changes")
        super().__init__(*args, **kwargs)
        self.action = action

    def note_text(self) -> str:
        return self.cleaned_data["note"]


def add_service_error(form: forms.Form, error: InvalidInput) -> None:
    """Put a service's InvalidInput on the field it names (``edits.payload.x`` → ``payload.x``)."""
    field = error.field or ""
    name = field.removeprefix("edits.")
    problem = error.message.removeprefix(f"{field}: ")
    form.add_error(name if name in form.fields else None, problem)


class DashboardRangeForm(forms.Form):
    """The dashboard's date range: UTC days, both included; the last 30 days by default."""

    since = forms.DateField(
        required=False, label="From", widget=forms.DateInput(attrs={"type": "date"})
    )
    until = forms.DateField(
        required=False, label="To", widget=forms.DateInput(attrs={"type": "date"})
    )
    export = forms.ChoiceField(
        required=False, choices=[("", "no"), ("daily", "daily"), ("refunds", "refunds")]
    )

    def __init__(self, data, *, today):
        super().__init__(data)
        self.today = today

    def clean(self):

        cleaned = super().clean()
        if self.errors:
            return cleaned
        until = cleaned.get("until") or self.today
        since = cleaned.get("since") or until - timedelta(days=29)
        if since > until:
            self.add_error("since", "must be on or before the end of the range")
        elif (until - since).days + 1 > MAX_DAYS:
            self.add_error("since", f"the range can be at most {MAX_DAYS} days")
        cleaned["since"], cleaned["until"] = since, until
        return cleaned
