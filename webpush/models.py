"""Reviewers' push subscriptions (one per browser on a device) and the push outbox."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.models import Group
from django.db import models
from django.utils import timezone

from approvals.models import Action, OutboxRow


class PushSubscription(models.Model):
    """A reviewer's registration of a browser's ``PushSubscription``: its endpoint and keys.

    An endpoint belongs to the reviewer who registered it first: only the earliest
    registration of an endpoint still standing (the lowest id) is pushed to. Another
    reviewer posting the same endpoint (a shared browser; or someone who got hold of the
    URL) is registered too, answered exactly as a fresh registration, and held: nothing
    is pushed to it, and the owner's row is untouched, until the owner's goes (they turn
    notifications off or remove the device). A push service answering 404 or 410 removes
    every registration of the endpoint (the browser dropped it).
    """

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="push_subscriptions"
    )
    endpoint = models.URLField(max_length=2000)
    p256dh = models.CharField(max_length=128)  # the browser's P-256 key, base64url
    auth = models.CharField(max_length=64)  # the 16-byte authentication secret, base64url
    device = models.CharField(max_length=200, blank=True)  # a label from the User-Agent
    created_at = models.DateTimeField(default=timezone.now)
    last_push_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            # Leading with the endpoint: it also finds an endpoint's owner (the earliest row).
            models.UniqueConstraint(fields=["endpoint", "user"], name="webpush_endpoint_per_user")
        ]

    def __str__(self) -> str:
        return f"{self.user} on {self.device or 'a browser'}"


class PushDelivery(OutboxRow):
    """One push to one subscription about one action (or a movement with none): an outbox row."""

    class Kind(models.TextChoices):
        NEW = "new", "New action"
        ESCALATED = "escalated", "Escalated"
        REMINDER = "reminder", "Reminder"
        LEDGER = "ledger.exception", "Reconciliation exception"  # ledger/notices.py

    subscription = models.ForeignKey(
        PushSubscription, on_delete=models.CASCADE, related_name="deliveries"
    )
    # None for a reconciliation exception with no action (money moved without an approval).
    action = models.ForeignKey(
        Action, null=True, blank=True, on_delete=models.CASCADE, related_name="pushes"
    )
    group = models.ForeignKey(Group, on_delete=models.CASCADE, related_name="+")
    kind = models.CharField(max_length=20, choices=Kind.choices)
    # What a push with no action says: title, amount, url, topic (ledger/notices.py).
    detail = models.JSONField(default=dict, blank=True)

    class Meta(OutboxRow.Meta):
        verbose_name_plural = "push deliveries"
