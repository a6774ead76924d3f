"""Who may decide from Slack is audited: links and channels changed (admin, shell, commands).

A link lets a Slack member approve as a reviewer; a channel decides who sees the
buttons. Both are recorded from model signals, with the person who changed
them (``audit.identity``).
"""

from __future__ import annotations

from django.contrib.auth.models import Group
from django.db.models.signals import post_delete, post_save

from audit.identity import _record

from .models import SlackChannel, SlackUserLink


def link_saved(sender, instance, created, raw=False, **kwargs):
    if raw:
        return
    _record(
        "slack.user_linked",
        {
            "slack_user_id": instance.slack_user_id,
            "user": instance.user.get_username(),
            "user_ref": f"user:{instance.user_id}",
        },
    )


def link_deleted(sender, instance, **kwargs):
    _record(
        "slack.user_unlinked",
        {"slack_user_id": instance.slack_user_id, "user_ref": f"user:{instance.user_id}"},
    )


def channel_saved(sender, instance, created, raw=False, **kwargs):
    if raw:
        return
    _record("slack.channel_changed", {"group": instance.group.name, "channel": instance.channel})


def channel_deleted(sender, instance, **kwargs):
    # A cascade from the group deletes this row first: the group's name can still be read.
    name = Group.objects.filter(pk=instance.group_id).values_list("name", flat=True).first()
    _record("slack.channel_changed", {"group": name, "channel": None})


def connect() -> None:

    post_save.connect(link_saved, sender=SlackUserLink, dispatch_uid="slack-link-saved")
    post_delete.connect(link_deleted, sender=SlackUserLink, dispatch_uid="slack-link-deleted")
    post_save.connect(channel_saved, sender=SlackChannel, dispatch_uid="slack-channel-saved")
    post_delete.connect(channel_deleted, sender=SlackChannel, dispatch_uid="slack-channel-deleted")
