"""Upstream MCP servers, the policy each of their tools gets, and the gated calls made through them.

Secrets are never stored: a header, a command argument or an environment value
names them as ``${VAR}``, read from the server's environment when the upstream
is called (``gateway/upstream.py``). ``clean`` refuses a credential written out.
"""

from __future__ import annotations

import re

from django.core.exceptions import ValidationError
from django.db import models

from approvals.models import Action, Agent
from rules.currencies import ISO_4217
from rules.money import money_spec_problem

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,49}$")
VAR_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
# Header names whose value is a credential: it must come from ${VAR}.
SECRET_HEADER_RE = re.compile(r"authorization|cookie|token|secret|key|password", re.I)


class Policy(models.TextChoices):
    ALLOW = "allow", "allow (pass through, audited)"
    REVIEW = "review", "review (a human approves each call)"
    DENY = "deny", "deny (hidden and refused)"


def secret_problem(field: str, values: dict) -> str | None:
    """A credential written out in ``values`` (headers or env), or None."""
    for name, value in values.items():
        if not isinstance(name, str) or not isinstance(value, str):
            return f"{field}: names and values must be text"
        if SECRET_HEADER_RE.search(name) and not VAR_RE.search(value):
            return (
                f"{field}.{name}: write the secret as ${{VAR}} (read from the server's "
                "environment at call time); secrets are not stored"
            )
    return None


class Upstream(models.Model):
    """An MCP server Impri stands in front of, at ``/mcp/gateway/<name>``."""

    name = models.CharField(
        max_length=50, unique=True, help_text="lowercase letters, digits, - and _"
    )
    url = models.CharField(
        max_length=2000, blank=True, help_text="streamable-HTTP endpoint (or use command)"
    )
    command = models.JSONField(
        default=list, blank=True, help_text='stdio server: ["npx", "-y", "some-mcp-server"]'
    )
    headers = models.JSONField(default=dict, blank=True, help_text="values may use ${VAR}")
    env = models.JSONField(
        default=dict,
        blank=True,
        help_text="stdio command's extra environment; values may use ${VAR}",
    )
    default_policy = models.CharField(max_length=10, choices=Policy.choices, default=Policy.DENY)
    enabled = models.BooleanField(default=True)
    # When the upstream's tools were first recorded (import or `impri gateway refresh`):
    # until then nothing is listed or forwarded.
    pinned_at = models.DateTimeField(null=True, blank=True, editable=False)
    # What the upstream offered when last asked (refreshed on demand).
    tools_cache = models.JSONField(default=list, blank=True, editable=False)
    tools_refreshed_at = models.DateTimeField(null=True, blank=True, editable=False)
    last_error = models.TextField(blank=True, editable=False)
    last_checked_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        if not NAME_RE.fullmatch(self.name or ""):
            raise ValidationError({"name": "lowercase letters, digits, - and _ (at most 50)"})
        if bool(self.url) == bool(self.command):
            raise ValidationError({"url": "give either url or command, not both"})
        if self.url and not re.match(r"^https?://", self.url):
            raise ValidationError({"url": "must be an http(s) URL"})
        if self.command and (
            not isinstance(self.command, list)
            or not all(isinstance(part, str) and part for part in self.command)
        ):
            raise ValidationError({"command": "a list of non-empty strings"})
        for field in ("headers", "env"):
            value = getattr(self, field)
            if not isinstance(value, dict):
                raise ValidationError({field: "a mapping of names to values"})
            problem = secret_problem(field, value)
            if problem:
                raise ValidationError({field: problem})

    @property
    def target(self) -> str:
        return self.url or " ".join(self.command[:1])


class ToolPolicy(models.Model):
    upstream = models.ForeignKey(Upstream, on_delete=models.CASCADE, related_name="policies")
    tool = models.CharField(max_length=200)
    policy = models.CharField(max_length=10, choices=Policy.choices)
    editable = models.JSONField(
        default=list, blank=True, help_text="argument paths a reviewer may change: [amount_cents]"
    )
    title = models.CharField(
        max_length=300, blank=True, help_text="e.g. Refund {amount_cents} cents on order {order_id}"
    )
    redact = models.BooleanField(
        default=False, help_text="audit only the hash of the arguments, not the arguments"
    )
    # None: the tool declares nothing (its kind is undeclared unless the rules file's kinds:
    # declares it, so the strict guards hold it); []: it declares that it moves no money.
    money = models.JSONField(
        default=None,
        null=True,
        blank=True,
        help_text='the amounts the call moves: [{"amount": "amount_cents", "currency": "currency"}]; '
        "[] if it moves none; empty: not declared (held to the strictest guard)",
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["upstream", "tool"], name="gateway_tool_once")
        ]
        ordering = ["upstream", "tool"]

    def __str__(self) -> str:
        return f"{self.upstream.name}.{self.tool}: {self.policy}"

    def clean(self) -> None:
        problem = money_problem(self.money)
        if problem:
            raise ValidationError({"money": problem})


def money_entry(entry: dict) -> dict:
    """A tool's money declaration as ``push_action`` takes it: argument paths under ``payload.``.

    ``currency`` is a fixed ISO 4217 code (``USD``) or else an argument path.
    """
    out = dict(entry)
    for key in ("amount", "currency"):
        value = entry.get(key)
        if isinstance(value, str) and not (key == "currency" and value in ISO_4217):
            out[key] = "payload." + value.removeprefix("payload.")
    out.setdefault("minor_units", True)
    out.setdefault("sign", "positive")
    return out


def money_problem(money) -> str | None:
    """What is wrong with a tool's ``money`` declaration, naming the entry and key, or None.

    ``[{amount: amount_cents, currency: currency}]``: ``amount`` is an argument
    path; ``currency`` an argument path or a fixed ISO 4217 code (``USD``);
    ``minor_units`` (default true: the amount is in cents) and ``sign``
    (``positive``, the default, or ``any``) are optional. The checks are the
    rules file's (``rules.money``), on the paths as they will be read.
    """
    if money is None:
        return None  # not declared
    if not isinstance(money, list):
        return "money: must be a list like [{amount: amount_cents, currency: currency}]"
    for index, entry in enumerate(money):
        raw = money_entry(entry) if isinstance(entry, dict) else entry
        problem = money_spec_problem(raw, "payload")
        if problem:
            where, message = problem
            return f"money[{index}]{'.' + where if where else ''}: {message}"
    return None


class PinnedTool(models.Model):
    """An upstream tool's definition as an operator accepted it, and a change waiting for review.

    ``sha256`` is over the canonical JSON of ``definition`` (name, title,
    description, input and output schema, annotations). Agents see only
    ``definition``; a call reaches the upstream only while the upstream offers
    exactly this definition. A different one (or a tool never pinned) is kept in
    ``pending_*`` until an operator accepts it (``impri gateway accept``, admin).
    """

    upstream = models.ForeignKey(Upstream, on_delete=models.CASCADE, related_name="pins")
    tool = models.CharField(max_length=200)
    definition = models.JSONField(null=True, blank=True)
    sha256 = models.CharField(max_length=64, blank=True)
    pinned_at = models.DateTimeField(null=True, blank=True)
    pinned_by = models.CharField(max_length=200, blank=True)
    pending_definition = models.JSONField(null=True, blank=True)
    pending_sha256 = models.CharField(max_length=64, blank=True)
    pending_since = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["upstream", "tool"], name="gateway_pin_once")
        ]
        ordering = ["upstream", "tool"]
        verbose_name = "pinned tool"
        permissions = [("accept_change", "Can accept a tool definition changed upstream")]

    def __str__(self) -> str:
        return f"{self.upstream.name}.{self.tool}"

    @property
    def held(self) -> bool:
        return bool(self.pending_sha256)


class GatedCall(models.Model):
    """A tool call that became an action: who asked, with what, and whether the upstream was called.

    ``upstream_called_at`` is claimed by one conditional UPDATE, so an approved
    call reaches the upstream at most once; ``delivered_at`` is set when the
    caller has been told the outcome, after which an identical call is a new action.
    """

    action = models.OneToOneField(
        Action, on_delete=models.CASCADE, primary_key=True, related_name="gated_call"
    )
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="+")
    gateway = models.CharField(max_length=50)
    tool = models.CharField(max_length=200)
    arguments_sha256 = models.CharField(max_length=64)
    # The pinned definition the call was made (and approved) against: the upstream
    # is called only while it still offers exactly this one.
    definition_sha256 = models.CharField(max_length=64, blank=True)
    upstream_called_at = models.DateTimeField(null=True, blank=True)
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["agent", "arguments_sha256"], name="gateway_call_args")]

    def __str__(self) -> str:
        return f"{self.gateway}.{self.tool} ({self.action_id})"
