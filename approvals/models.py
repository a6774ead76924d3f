from __future__ import annotations

import base64
import hashlib
import secrets
import string

from django.conf import settings
from django.contrib.auth.models import Group
from django.db import models
from django.db.models import Q
from django.utils import timezone

from .signing_keys import GrantSigningKey, IssuedGrant  # noqa: F401  (models in a module of their own)

BASE62 = string.ascii_letters + string.digits


def random_base62(length: int) -> str:
    """``length`` characters, every string equally likely: one draw from the OS CSPRNG."""
    number = secrets.randbelow(len(BASE62) ** length)
    chars = []
    for _ in range(length):
        number, digit = divmod(number, len(BASE62))
        chars.append(BASE62[digit])
    return "".join(chars)


def new_action_id() -> str:
    # 24 base62 characters: about 143 bits from the OS CSPRNG.
    return "act_" + random_base62(24)


def new_webhook_secret() -> str:
    # Standard Webhooks: "whsec_" + base64 of the raw key (32 random bytes).
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


def new_message_id() -> str:
    return "msg_" + random_base62(24)


def hash_key(raw: str) -> str:
    # Keys carry 238 bits of randomness, so a fast hash is enough: there is
    # nothing to brute-force, and lookups stay one indexed equality.
    return hashlib.sha256(raw.encode()).hexdigest()


class Agent(models.Model):
    name = models.CharField(max_length=100, unique=True)
    description = models.TextField(blank=True)
    is_active = models.BooleanField(default=True)
    created_at = models.DateTimeField(default=timezone.now)
    webhook_secret = models.CharField(
        max_length=100,
        default=new_webhook_secret,
        help_text="Signs webhooks to this agent (Standard Webhooks).",
    )
    owners = models.ManyToManyField(
        settings.AUTH_USER_MODEL,
        blank=True,
        related_name="owned_agents",
        help_text="The people who run this agent. An owner never approves its actions "
        "(requester and approver must differ); they may still read and reject them.",
    )

    def __str__(self) -> str:
        return self.name

    def is_owned_by(self, user) -> bool:
        return self.owners.filter(pk=user.pk).exists()


class ApiKeyQuerySet(models.QuerySet):
    def active(self):
        return self.filter(revoked_at__isnull=True)


class ApiKey(models.Model):
    """An agent key or a reviewer token. Only its SHA-256 is stored."""

    class Kind(models.TextChoices):
        AGENT = "agent", "agent key"
        REVIEWER = "reviewer", "reviewer token"

    PREFIXES = {Kind.AGENT: "imp_a_", Kind.REVIEWER: "imp_r_"}

    kind = models.CharField(max_length=10, choices=Kind.choices)
    agent = models.ForeignKey(
        Agent, null=True, blank=True, on_delete=models.CASCADE, related_name="keys"
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="impri_tokens",
    )
    prefix = models.CharField(
        max_length=16, db_index=True, help_text="The visible start of the key."
    )
    key_hash = models.CharField(max_length=64, unique=True, editable=False)
    label = models.CharField(max_length=100, blank=True)
    is_service = models.BooleanField(
        default=False,
        help_text="A reviewer token used by a program, not a person: it can never approve "
        "an amount at or above the step-up threshold (IMPRI_STEP_UP_CENTS).",
    )
    created_at = models.DateTimeField(default=timezone.now)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    objects = ApiKeyQuerySet.as_manager()

    class Meta:
        verbose_name = "API key"
        constraints = [
            models.CheckConstraint(
                name="apikey_has_exactly_one_owner",
                condition=(Q(kind="agent", agent__isnull=False, user__isnull=True))
                | (Q(kind="reviewer", agent__isnull=True, user__isnull=False)),
            )
        ]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.get_kind_display()})"


class ActionStatus(models.TextChoices):
    PENDING = "pending"
    APPROVED = "approved"
    REJECTED = "rejected"
    # A reviewer asked the agent to change something: settled, terminal, not approved.
    CHANGES_REQUESTED = "changes_requested"
    EXPIRED = "expired"
    CANCELLED = "cancelled"
    EXECUTED = "executed"
    FAILED = "failed"


class RejectReason(models.TextChoices):
    """Why a reviewer rejected: a code the agent can branch on, beside the free-text note."""

    WRONG_AMOUNT = "wrong_amount", "Wrong amount"
    POLICY = "policy", "Against policy"
    DUPLICATE = "duplicate", "Duplicate"
    NEEDS_INFO = "needs_info", "Needs more information"
    SUSPICIOUS = "suspicious", "Looks suspicious"
    OTHER = "other", "Other"


class PreviewFormat(models.TextChoices):
    PLAIN = "plain"
    MARKDOWN = "markdown"
    DIFF = "diff"
    JSON = "json"


class ActionQuerySet(models.QuerySet):
    def overdue(self, now=None):
        return self.filter(status=ActionStatus.PENDING, expires_at__lte=now or timezone.now())

    def with_effective_status(self, status: str, now=None):
        """Filter by status as readers see it: an overdue pending action is expired."""
        now = now or timezone.now()
        if status == ActionStatus.PENDING:
            return self.filter(status=ActionStatus.PENDING, expires_at__gt=now)
        if status == ActionStatus.EXPIRED:
            return self.filter(
                Q(status=ActionStatus.EXPIRED) | Q(status=ActionStatus.PENDING, expires_at__lte=now)
            )
        return self.filter(status=status)

    def visible_to_reviewer(self, user):
        if user.is_superuser:
            return self
        return self.filter(review_group__in=user.groups.all())


class Action(models.Model):
    id = models.CharField(primary_key=True, max_length=40, default=new_action_id, editable=False)
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="actions")
    kind = models.CharField(max_length=100, db_index=True)
    title = models.CharField(max_length=200)
    preview_format = models.CharField(max_length=10, choices=PreviewFormat.choices)
    preview_body = models.TextField(blank=True)
    payload = models.JSONField()
    original_payload = models.JSONField()
    context = models.JSONField(default=dict, blank=True)
    target_url = models.URLField(max_length=2000, blank=True)
    editable = models.JSONField(default=list, blank=True)
    flags = models.JSONField(default=list, blank=True)

    # NULL, not "", so the per-agent unique constraint ignores actions pushed without a key.
    idempotency_key = models.CharField(max_length=200, null=True, blank=True)  # noqa: DJ001
    request_hash = models.CharField(max_length=64, editable=False)

    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    expires_at = models.DateTimeField(db_index=True)
    status = models.CharField(
        max_length=20, choices=ActionStatus.choices, default=ActionStatus.PENDING
    )
    review_group = models.ForeignKey(
        Group, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    approvals_required = models.PositiveSmallIntegerField(default=1)
    # What the rules decided at push time, kept so reviewers and auditors see why.
    rule_name = models.CharField(max_length=200, blank=True)
    rule_version = models.PositiveIntegerField(null=True, blank=True)
    rule_trace = models.JSONField(default=list, blank=True)
    edit_bounds = models.JSONField(default=dict, blank=True)
    # Money as fixed at push (null: the detector reads it) and the guarded amount (approvals.money).
    money = models.JSONField(null=True, blank=True)
    amount_minor = models.BigIntegerField(null=True, blank=True, db_index=True)
    amount_currency = models.CharField(max_length=3, blank=True)
    escalate_at = models.DateTimeField(null=True, blank=True, db_index=True)
    escalate_to = models.CharField(max_length=150, blank=True)
    last_reminded_at = models.DateTimeField(null=True, blank=True)
    stale_flagged_at = models.DateTimeField(null=True, blank=True)
    callback_url = models.URLField(max_length=2000, blank=True)
    # The earlier action of the same agent that this one replaces (after changes were requested).
    supersedes = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="superseded_by"
    )

    decided_by_user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    decided_by_rule = models.CharField(max_length=200, blank=True)
    decided_at = models.DateTimeField(null=True, blank=True)
    note = models.TextField(blank=True)
    reject_reason = models.CharField(max_length=20, blank=True, choices=RejectReason.choices)
    edited_by_human = models.BooleanField(default=False)

    result_status = models.CharField(max_length=10, blank=True)
    result_detail = models.JSONField(null=True, blank=True)
    result_reference = models.CharField(max_length=255, blank=True, db_index=True)  # re_...
    reported_at = models.DateTimeField(null=True, blank=True)

    objects = ActionQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        permissions = [("view_dashboard", "Can view the inbox dashboard (figures of every queue)")]
        constraints = [
            models.UniqueConstraint(
                fields=["agent", "idempotency_key"],
                condition=Q(idempotency_key__isnull=False),
                name="action_unique_idempotency_key_per_agent",
            ),
            # An action is replaced at most once, even by two pushes at the same instant.
            models.UniqueConstraint(
                fields=["supersedes"],
                condition=Q(supersedes__isnull=False),
                name="action_superseded_once",
            ),
        ]
        indexes = [
            models.Index(fields=["status", "expires_at"], name="action_status_expiry"),
            # The inbox queue: pending actions, newest first, paged by keyset.
            models.Index(fields=["status", "-created_at", "-id"], name="action_status_newest"),
        ]

    def __str__(self) -> str:
        return f"{self.id} {self.kind} ({self.status})"

    def is_overdue(self, now=None) -> bool:
        return self.status == ActionStatus.PENDING and self.expires_at <= (now or timezone.now())

    @property
    def effective_status(self) -> str:
        """The status a reader sees: an overdue pending action is expired even before the sweep."""
        return ActionStatus.EXPIRED if self.is_overdue() else self.status

    @property
    def is_settled(self) -> bool:
        return self.effective_status != ActionStatus.PENDING

    @property
    def was_approved(self) -> bool:
        """Approved, whether or not a result has been reported since."""
        return self.status in (ActionStatus.APPROVED, ActionStatus.EXECUTED, ActionStatus.FAILED)

    @property
    def decision_at(self):
        if self.effective_status == ActionStatus.EXPIRED and self.decided_at is None:
            return self.expires_at
        return self.decided_at

    @property
    def decided_by(self) -> dict | None:
        """Who settled the action: a reviewer, a rule, the agent (cancel) or the system (expiry)."""
        status = self.effective_status
        if self.decided_by_user_id:
            return {"type": "reviewer", "name": self.decided_by_user.get_username()}
        if self.decided_by_rule:
            return {"type": "rule", "name": self.decided_by_rule}
        if status == ActionStatus.CANCELLED:
            return {"type": "agent", "name": self.agent.name}
        if status == ActionStatus.EXPIRED:
            return {"type": "system", "name": "expiry"}
        return None


class Review(models.Model):
    """One reviewer's verdict on an action. With approvals_required > 1 several accumulate."""

    class Verdict(models.TextChoices):
        APPROVE = "approve"
        REJECT = "reject"
        CHANGES = "changes", "request changes"

    action = models.ForeignKey(Action, on_delete=models.CASCADE, related_name="reviews")
    reviewer = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+"
    )
    verdict = models.CharField(max_length=10, choices=Verdict.choices)
    edits = models.JSONField(default=dict, blank=True)
    # The payload this reviewer approved: with approvals_required > 1 only
    # approvals of the same payload count together.
    payload_sha256 = models.CharField(max_length=64, blank=True)
    note = models.TextField(blank=True)
    # The reviewer's Idempotency-Key: a retry of this very decision answers 200.
    idempotency_key = models.CharField(max_length=200, blank=True)
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["at", "pk"]
        constraints = [
            models.UniqueConstraint(
                fields=["action", "reviewer"], name="review_one_per_reviewer_per_action"
            )
        ]

    def __str__(self) -> str:
        return f"{self.reviewer} {self.verdict}s {self.action_id}"


class Claim(models.Model):
    """A reviewer's "I'm on it" on a pending action: advisory, one per action, until it expires."""

    action = models.OneToOneField(
        Action, primary_key=True, on_delete=models.CASCADE, related_name="claim"
    )
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    claimed_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(db_index=True)

    def __str__(self) -> str:
        return f"{self.user} on {self.action_id} until {self.expires_at:%H:%M:%S}"


class OutboxQuerySet(models.QuerySet):
    def due(self, now):
        """Undelivered, not given up, due, and not leased by a live worker."""
        return self.filter(
            delivered_at__isnull=True, gave_up_at__isnull=True, next_attempt_at__lte=now
        ).filter(Q(locked_until__isnull=True) | Q(locked_until__lte=now))


class OutboxRow(models.Model):
    """What every outbox row has: when it is due, who holds its lease, how it ended."""

    created_at = models.DateTimeField(default=timezone.now)
    next_attempt_at = models.DateTimeField(default=timezone.now)
    attempts = models.PositiveIntegerField(default=0)
    locked_until = models.DateTimeField(null=True, blank=True)
    delivered_at = models.DateTimeField(null=True, blank=True)
    gave_up_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)

    objects = OutboxQuerySet.as_manager()

    class Meta:
        abstract = True
        ordering = ["-created_at"]
        indexes = [
            # The sweeps' "what is due" reads only open rows: a partial index keeps
            # that read the same size however much delivered history accumulates.
            models.Index(
                fields=["next_attempt_at"],
                condition=Q(delivered_at__isnull=True, gave_up_at__isnull=True),
                name="%(class)s_due",
            )
        ]


class WebhookDelivery(OutboxRow):
    """One webhook message to an agent's callback_url: an outbox row, delivered at least once.

    Written in the transaction of the change it announces, so it exists exactly
    when the change does. A worker leases it (``locked_until``) before sending;
    a worker that dies leaves the lease to run out, and the next one sends the
    same message again with the same ``id`` (the ``webhook-id`` header).
    """

    id = models.CharField(primary_key=True, max_length=40, default=new_message_id, editable=False)
    action = models.ForeignKey(Action, on_delete=models.CASCADE, related_name="webhooks")
    event = models.CharField(max_length=40)
    url = models.URLField(max_length=2000)
    body = models.JSONField()

    class Meta(OutboxRow.Meta):
        verbose_name_plural = "webhook deliveries"

    def __str__(self) -> str:
        return f"{self.id} {self.event} → {self.url}"


class WebhookAttempt(models.Model):
    delivery = models.ForeignKey(
        WebhookDelivery, on_delete=models.CASCADE, related_name="attempt_log"
    )
    at = models.DateTimeField(default=timezone.now)
    status_code = models.PositiveIntegerField(null=True, blank=True)
    error = models.TextField(blank=True)
    duration_ms = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["at", "pk"]

    def __str__(self) -> str:
        return f"{self.delivery_id} at {self.at:%H:%M:%S}: {self.status_code or self.error}"


class GroupNotificationSettings(models.Model):
    """How a reviewer group hears about its queue."""

    group = models.OneToOneField(
        Group, on_delete=models.CASCADE, related_name="notification_settings"
    )
    email_enabled = models.BooleanField(
        default=True, help_text="Email the group's members (those with an address)."
    )
    extra_emails = models.JSONField(
        default=list, blank=True, help_text="More addresses, e.g. a shared inbox."
    )
    slack_webhook_url = models.URLField(
        max_length=500, blank=True, help_text="A Slack incoming-webhook URL."
    )
    reminder_every_s = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Remind the group of each undecided action this often (empty: never).",
    )

    class Meta:
        verbose_name_plural = "group notification settings"

    def __str__(self) -> str:
        return f"notifications for {self.group}"


class Notification(OutboxRow):
    """One message to a reviewer group about an action: an outbox row like WebhookDelivery."""

    class Kind(models.TextChoices):
        NEW = "new", "new action in the queue"
        ESCALATED = "escalated", "escalated to the group"
        REMINDER = "reminder", "still undecided"
        STALE = "stale", "approved but no result reported"

    class Channel(models.TextChoices):
        EMAIL = "email"
        SLACK = "slack"

    action = models.ForeignKey(Action, on_delete=models.CASCADE, related_name="notifications")
    group = models.ForeignKey(Group, on_delete=models.CASCADE, related_name="+")
    kind = models.CharField(max_length=12, choices=Kind.choices)
    channel = models.CharField(max_length=8, choices=Channel.choices)

    def __str__(self) -> str:
        return f"{self.kind} {self.channel} to {self.group} about {self.action_id}"
