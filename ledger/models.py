"""What the processor moved (``Movement``), each processor event once (``ProcessorEvent``),
an action's reconciliation (``Settlement``) and the notices of its exceptions (``Notice``)."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from approvals.models import OutboxRow


class State(models.TextChoices):
    MATCHED = "matched", "matched"
    MISMATCH = "mismatch", "another amount or currency than approved"
    UNAPPROVED = "unapproved", "money moved without an approval"
    DUPLICATE = "duplicate", "more than approved, in several movements"
    UNSETTLED = "unsettled", "reported executed, no movement"
    UNREPORTED = "unreported", "money moved, the agent never reported"
    EXPLAINED = "explained", "explained by a reviewer"
    AWAITING = "awaiting", "approved, no movement yet"


EXCEPTIONS = (
    State.MISMATCH,
    State.UNAPPROVED,
    State.DUPLICATE,
    State.UNSETTLED,
    State.UNREPORTED,
)


class Movement(models.Model):
    """One refund or charge at the processor, as its latest event says it is."""

    class Kind(models.TextChoices):
        REFUND = "refund"
        CHARGE = "charge"

    source = models.CharField(max_length=20)  # stripe, api, stripe-csv, generic-csv
    external_id = models.CharField(max_length=255)  # re_..., ch_..., or the caller's id
    kind = models.CharField(max_length=10, choices=Kind.choices)
    amount_minor = models.BigIntegerField()
    currency = models.CharField(max_length=3)
    occurred_at = models.DateTimeField()
    reference = models.CharField(max_length=255, blank=True)  # the charge / payment intent
    processor_status = models.CharField(max_length=20, blank=True)  # succeeded, failed...
    # Which processor event last set the row: an older one arriving later changes nothing.
    event_created = models.BigIntegerField(default=0)
    metadata = models.JSONField(default=dict, blank=True)
    body_sha256 = models.CharField(max_length=64, blank=True)  # the generic API's idempotency
    action = models.ForeignKey(
        "approvals.Action",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="movements",
    )
    matched_by = models.CharField(max_length=20, blank=True)  # metadata, reference, ""
    state = models.CharField(max_length=12, choices=State.choices, db_index=True)
    explained_reason = models.TextField(blank=True)
    explained_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    explained_at = models.DateTimeField(null=True, blank=True)
    recorded_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["source", "external_id"], name="movement_once")
        ]
        permissions = [("reconcile", "Can mark reconciliation exceptions explained")]
        ordering = ["-occurred_at", "-pk"]

    def __str__(self) -> str:
        return f"{self.kind} {self.external_id} ({self.state})"

    @property
    def counts(self) -> bool:
        """Money that moved (or is moving): a failed or cancelled refund moved nothing."""
        return self.processor_status not in ("failed", "canceled")


class ProcessorEvent(models.Model):
    """A processor's event id, recorded once however often it is delivered."""

    source = models.CharField(max_length=20)
    event_id = models.CharField(max_length=255)
    type = models.CharField(max_length=100)
    received_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["source", "event_id"], name="processor_event_once")
        ]

    def __str__(self) -> str:
        return f"{self.source} {self.event_id}"


class Settlement(models.Model):
    """An approved action's reconciliation: its state, and a reviewer's explanation."""

    action = models.OneToOneField(
        "approvals.Action", primary_key=True, on_delete=models.CASCADE, related_name="settlement"
    )
    state = models.CharField(max_length=12, choices=State.choices, db_index=True)
    computed_state = models.CharField(max_length=12, choices=State.choices)
    explained_state = models.CharField(max_length=12, blank=True)  # what the note explained
    explained_reason = models.TextField(blank=True)
    explained_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    explained_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"{self.action_id}: {self.state}"


class Notice(OutboxRow):
    """One ``ledger.exception`` notice to one destination: an outbox row delivery sends.

    ``key`` names the exception (``action:<id>:<state>`` or ``movement:<pk>:<state>``)
    and the destination, so one exception is told once per destination.
    """

    class Channel(models.TextChoices):
        SLACK = "slack"
        EMAIL = "email"
        PUSH = "push"  # a marker: the pushes are webpush's rows, queued once with it
        WEBHOOK = "webhook"  # the operator's IMPRI_LEDGER_WEBHOOK_URL, signed here
        CALLBACK = "callback"  # a marker: the action's callback_url, a WebhookDelivery row

    key = models.CharField(max_length=400, unique=True)
    channel = models.CharField(max_length=8, choices=Channel.choices)
    destination = models.CharField(max_length=2000)  # a URL or an e-mail address
    body = models.JSONField()

    class Meta(OutboxRow.Meta):
        pass

    def __str__(self) -> str:
        return f"{self.channel} {self.key}"
