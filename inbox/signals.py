"""Close a reviewer's live sockets when their access changes.

A socket joins its groups once, at connect; without this, a reviewer who logs
out, or leaves a group, keeps receiving that group's hints until the browser
tab closes. Each close happens after the change commits; the browser
reconnects and is checked again (refused when logged out).
"""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.signals import user_logged_out
from django.db import transaction
from django.db.models.signals import m2m_changed, post_save
from django.dispatch import receiver

from approvals import events

from .consumers import session_channel_group, user_channel_group

CLOSE = {"type": "inbox.close"}
# Saving only these never changes what a socket may see (a login saves last_login).
HARMLESS_FIELDS = frozenset({"last_login"})


def close_sockets_of_users(user_pks) -> None:
    pks = sorted(set(user_pks))
    transaction.on_commit(
        lambda: events.publish_many([(user_channel_group(pk), CLOSE) for pk in pks])
    )


@receiver(user_logged_out)
def close_on_logout(sender, request, user, **kwargs):
    session_key = getattr(getattr(request, "session", None), "session_key", None)
    if session_key:
        events.publish(session_channel_group(session_key), CLOSE)


@receiver(m2m_changed, sender=get_user_model().groups.through)
def close_on_group_change(sender, instance, action, reverse, pk_set, **kwargs):
    if action not in ("post_add", "post_remove", "pre_clear"):
        return
    if not reverse:  # user.groups.add(...): instance is the user
        close_sockets_of_users([instance.pk])
    elif action == "pre_clear":  # group.user_set.clear(): every member before the clear
        close_sockets_of_users(instance.user_set.values_list("pk", flat=True))
    else:  # group.user_set.add(...): pk_set holds the users
        close_sockets_of_users(pk_set or [])


@receiver(post_save, sender=get_user_model())
def close_on_account_change(sender, instance, created, update_fields=None, **kwargs):
    if created or (update_fields is not None and set(update_fields) <= HARMLESS_FIELDS):
        return
    close_sockets_of_users([instance.pk])
