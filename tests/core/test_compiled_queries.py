"""A statement compiled once (``compat.django.CompiledQuery``) answers as its queryset does.

The group's channel config runs on every push that reaches a queue, so its ORM
statement is compiled once per process (``approvals.outbox._compiled``). Run again
with another group's id bound, it must read exactly what the same queryset, built and
evaluated the ordinary way for that group, reads: members with and without an address,
inactive ones, a settings row or none, a phone or none, a group that is gone.
"""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, User
from django.db import connection
from django.db.models import Exists, OuterRef

from approvals import outbox
from approvals.models import GroupNotificationSettings
from compat.django import CompiledQuery
from webpush.models import PushSubscription

pytestmark = pytest.mark.django_db


def _queryset(group_id: int):
    """The same queryset, for one group, to be evaluated by the ORM as usual."""
    members = User.objects.filter(groups=OuterRef("pk"), is_active=True).exclude(email="")
    reach = {
        f"reaches_{name}": channel.reachable() for name, channel in outbox.GROUP_CHANNELS.items()
    }
    return (
        Group.objects.filter(pk=group_id)
        .annotate(has_members=Exists(members), **reach)
        .values_list(
            "has_members",
            *reach,
            "notification_settings__pk",
            *(f"notification_settings__{field}" for field in outbox.SAVED_FIELDS),
        )
    )


def _groups() -> list[int]:
    empty = Group.objects.create(name="empty")
    silent = Group.objects.create(name="no-address")
    User.objects.create(username="quiet", email="").groups.add(silent)
    User.objects.create(username="gone", email="gone@example.com", is_active=False).groups.add(
        silent
    )
    mailed = Group.objects.create(name="mailed")
    mailed_user = User.objects.create(username="mia", email="mia@example.com")
    mailed_user.groups.add(mailed)
    configured = Group.objects.create(name="configured")
    GroupNotificationSettings.objects.create(
        group=configured,
        email_enabled=False,
        extra_emails=["ops@example.com"],
        slack_webhook_url="https://hooks.slack.com/services/T/B/x",
    )
    phoned = Group.objects.create(name="phoned")
    phone_user = User.objects.create(username="pat", email="")
    phone_user.groups.add(phoned)
    PushSubscription.objects.create(
        user=phone_user,
        endpoint="https://push.example.com/send/abc",
        p256dh="BExample",
        auth="secret",
    )
    return [empty.pk, silent.pk, mailed.pk, configured.pk, phoned.pk, 999_999]


def test_the_compiled_channel_config_reads_what_its_queryset_reads():
    compiled = outbox._compiled(connection.alias, tuple(outbox.GROUP_CHANNELS))
    empty, silent, mailed, configured, phoned, gone = _groups()
    answers = {}
    for group_id in (empty, silent, mailed, configured, phoned, gone):
        answers[group_id] = compiled.first(connection, group_id)
        assert answers[group_id] == _queryset(group_id).first(), group_id
    # The cases differ where they should, so the equalities above mean something.
    assert answers[gone] is None
    assert answers[empty] == answers[silent]  # nobody with an address, no phone, no settings
    assert answers[mailed][0] is True
    assert answers[phoned][0] is False and True in answers[phoned][1:-4]
    assert answers[configured][-4:] == (
        answers[configured][-4],
        False,
        ["ops@example.com"],
        "https://hooks.slack.com/services/T/B/x",
    )


def test_a_placeholder_that_is_not_in_the_statement_is_refused():
    with pytest.raises(ValueError, match="placeholder"):
        CompiledQuery(Group.objects.filter(name="x").values_list("pk"), -1)
