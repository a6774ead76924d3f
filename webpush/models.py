"""Reviewers' push subscriptions (one per browser on a device) and the push outbox."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.models import Group
from django.db import models
from django.utils import timezone

from approvals.models import Action, OutboxRow


class PushSubscription(models.Model):
    """A browser's ``PushSubscription``: where its push service takes messages, and its keys.

    One endpoint belongs to one reviewer: the last one who turned notifications on in
    that browser. A push service answering 404 or 410 removes it (the browser dropped it).
    """

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="push_subscriptions"
    )
    endpoint = models.URLField(max_length=2000, unique=True)
    p256dh = models.CharField(max_length=128)  # the browser's P-256 key, base64url
    auth = models.CharField(max_length=64)  # the 16-byte authentication secret, base64url
    device = models.CharField(max_length=200, blank=True)  # a label from the User-Agent
    created_at = models.DateTimeField(default=timezone.now)
    last_push_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.user} on {self.device or 'a browser'}"


class PushDelivery(OutboxRow):
    """One push to one subscription about one action: an outbox row like a webhook."""

    class Kind(models.TextChoices):
        NEW = "new", "New action"
        ESCALATED = "escalated", "Escalated"
        REMINDER = "reminder", "Reminder"

    subscription = models.ForeignKey(
        PushSubscription, on_delete=models.CASCADE, related_name="deliveries"
    )
    action = models.ForeignKey(Action, on_delete=models.CASCADE, related_name="pushes")
    group = models.ForeignKey(Group, on_delete=models.CASCADE, related_name="+")
    kind = models.CharField(max_length=20, choices=Kind.choices)

    class Meta(OutboxRow.Meta):
        verbose_name_plural = "push deliveries"
