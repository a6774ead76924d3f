"""The Slack app's configuration (a channel per reviewer group, explicit user links) and
its messages, one per action and group: an outbox row that posts, then updates in place."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.models import Group
from django.core.validators import RegexValidator
from django.db import models
from django.utils import timezone

from approvals.models import Action, OutboxRow

channel_id = RegexValidator(
    r"^[A-Z0-9]{2,40}$", "a Slack channel ID such as C0123ABCD (channel details, at the bottom)"
)
slack_user_id = RegexValidator(
    r"^[UW][A-Z0-9]{2,40}$", "a Slack member ID such as U0123ABCD (profile, ⋮, Copy member ID)"
)


class SlackChannel(models.Model):
    """Where the bot posts a group's actions, with Approve / Edit / Reject buttons."""

    group = models.OneToOneField(Group, on_delete=models.CASCADE, related_name="slack_channel")
    channel = models.CharField(
        max_length=40,
        validators=[channel_id],
        help_text="The channel's ID (C0123ABCD); invite the Impri app to it (/invite @Impri).",
    )

    def __str__(self) -> str:
        return f"{self.group} → {self.channel}"


class SlackUserLink(models.Model):
    """A Slack member who acts as an Impri reviewer, whatever their Slack e-mail says."""

    slack_user_id = models.CharField(
        max_length=40, unique=True, validators=[slack_user_id], verbose_name="Slack member ID"
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="slack_links"
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name = "Slack user link"

    def __str__(self) -> str:
        return f"{self.slack_user_id} → {self.user}"


class SlackMessage(OutboxRow):
    """An action's message in one group's channel.

    Due (an outbox row) until Slack shows the action as it stands: the first
    send posts it (``ts`` kept), later ones update it in place. Every change to
    the action bumps ``revision`` and makes the row due again; a send counts as
    delivered only if no change came in while it was under way.
    """

    action = models.ForeignKey(Action, on_delete=models.CASCADE, related_name="slack_messages")
    group = models.ForeignKey(Group, on_delete=models.CASCADE, related_name="+")
    channel = models.CharField(max_length=40)
    ts = models.CharField(max_length=40, blank=True, help_text="Slack's id of the posted message.")
    revision = models.PositiveIntegerField(default=0)

    class Meta(OutboxRow.Meta):
        constraints = [
            models.UniqueConstraint(fields=["action", "group"], name="slackmessage_one_per_group")
        ]

    def __str__(self) -> str:
        return f"{self.action_id} in {self.channel}" + (f" ({self.ts})" if self.ts else "")
