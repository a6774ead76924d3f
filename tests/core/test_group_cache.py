"""What a push reads about its reviewer group comes from the process's cache
(``approvals.group_cache``) and is read again after every change that matters to it.

Each test warms the cache with a push, changes a group, a member, a setting or a phone as
the admin, the SSO login or the inbox would, and checks that the next push sees it. A test
here fails if the change did not start a new generation of the groups' cache.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth.models import Group, User
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from approvals import group_cache
from approvals.models import Action, GroupNotificationSettings, Notification
from tests.factories import install_rules, refund

pytestmark = pytest.mark.django_db(transaction=True)

RULES = """
rules:
  - name: refunds to finance
    kind: payment.refund
    then: review
    group: finance
"""


@pytest.fixture
def finance(db) -> Group:
    install_rules(RULES)
    return Group.objects.get(name="finance")


@pytest.fixture
def fiona(finance) -> User:
    user = User.objects.create_user("fiona", email="fiona@example.com")
    user.groups.add(finance)
    return user


def _push(agent) -> Action:
    response = agent.client().post(
        "/actions", refund(9000), headers={"Idempotency-Key": uuid.uuid4().hex}
    )
    assert response.status_code == 201, response.content
    return Action.objects.get(pk=response.json()["action_id"])


def _channels(action: Action) -> set[str]:
    return set(Notification.objects.filter(action=action).values_list("channel", flat=True))


def _group_reads(agent) -> tuple[Action, int]:
    """A push, and how many of its statements read the groups or their channels."""
    with CaptureQueriesContext(connection) as queries:
        action = _push(agent)
    return action, sum('FROM "auth_group"' in q["sql"] for q in queries.captured_queries)


def test_a_warm_push_reads_no_group(agent, fiona):
    _push(agent)
    action, reads = _group_reads(agent)
    assert reads == 0
    assert action.review_group.name == "finance" and _channels(action) == {"email"}


def test_a_warm_push_asks_the_shared_cache_once_for_its_first_read(agent, finance, monkeypatch):
    """The revision and the groups are read under one look at the generation; a push that
    waits for review looks once more, for its group's channels (inside its transaction)."""
    _push(agent)
    looks = []
    real = group_cache._GENERATION.current
    monkeypatch.setattr(group_cache._GENERATION, "current", lambda: looks.append(1) or real())
    _push(agent)
    assert len(looks) == 2


def test_a_member_removed_from_the_group_is_no_longer_emailed(agent, fiona, finance):
    assert _channels(_push(agent)) == {"email"}
    fiona.groups.remove(finance)
    assert _channels(_push(agent)) == set()


def test_a_member_removed_from_the_groups_side_is_no_longer_emailed(agent, fiona, finance):
    assert _channels(_push(agent)) == {"email"}
    finance.user_set.clear()
    assert _channels(_push(agent)) == set()


def test_a_member_added_is_emailed(agent, finance):
    assert _channels(_push(agent)) == set()  # nobody in it
    User.objects.create_user("gus", email="gus@example.com").groups.add(finance)
    assert _channels(_push(agent)) == {"email"}


def test_a_disabled_member_or_a_removed_address_is_not_emailed(agent, fiona):
    assert _channels(_push(agent)) == {"email"}
    fiona.is_active = False
    fiona.save()  # as the admin saves it
    assert _channels(_push(agent)) == set()
    fiona.is_active, fiona.email = True, ""
    fiona.save()
    assert _channels(_push(agent)) == set()


def test_a_login_keeps_the_cache(agent, fiona):
    _push(agent)
    fiona.save(update_fields=["last_login"])  # what every login writes
    assert _group_reads(agent)[1] == 0


def test_the_groups_settings_are_read_again_when_saved(agent, fiona, finance):
    assert _channels(_push(agent)) == {"email"}
    saved = GroupNotificationSettings.objects.create(
        group=finance, email_enabled=False, slack_webhook_url="https://hooks.slack.com/x"
    )
    assert _channels(_push(agent)) == {"slack"}
    saved.delete()
    assert _channels(_push(agent)) == {"email"}


def test_a_phone_registered_or_removed_is_seen(agent, fiona):
    from webpush.models import PushDelivery, PushSubscription

    assert not PushDelivery.objects.filter(action=_push(agent)).exists()
    phone = PushSubscription.objects.create(
        user=fiona, endpoint="https://push.example.com/f", p256dh="k", auth="a"
    )
    assert PushDelivery.objects.filter(action=_push(agent)).count() == 1
    phone.delete()
    assert not PushDelivery.objects.filter(action=_push(agent)).exists()


def test_a_group_created_after_a_push_is_routed_to(agent, db):
    install_rules(RULES.replace("finance", "treasury"))
    Group.objects.filter(name="treasury").delete()
    assert _push(agent).review_group.name == settings.IMPRI_DEFAULT_GROUP  # no such group
    Group.objects.create(name="treasury")
    assert _push(agent).review_group.name == "treasury"


def test_a_renamed_group_is_not_routed_to_by_its_old_name(agent, finance):
    assert _push(agent).review_group == finance
    finance.name = "finance-2025"
    finance.save()
    assert _push(agent).review_group.name == settings.IMPRI_DEFAULT_GROUP


def test_a_rule_set_change_is_in_force_at_the_next_push(agent, finance):
    """The rules' revision is kept with the groups: a new rule set (here one that names no new
    group, so only its version moves the generation) decides the next push."""
    assert _push(agent).status == "pending"
    install_rules(RULES.replace("then: review", "then: auto_reject\n    reason: closed"))
    assert _push(agent).status == "rejected"


def test_a_change_rolled_back_is_never_kept(agent, fiona, finance):
    """What a transaction read after changing a group is kept only if it commits."""
    from approvals import outbox

    with pytest.raises(RuntimeError), transaction.atomic():
        fiona.groups.remove(finance)
        assert outbox._channel_config(finance)[0] is False  # read inside, not kept
        raise RuntimeError
    assert _channels(_push(agent)) == {"email"}


def test_a_caller_cannot_change_what_the_cache_holds(agent, finance):
    _push(agent)
    found = group_cache.groups_named({"finance"})
    found["finance"].name = "changed by a request"
    assert group_cache.groups_named({"finance"})["finance"].name == "finance"


def test_without_the_shared_cache_groups_are_read_every_time(agent, fiona, monkeypatch):
    _push(agent)

    def away(*args, **kwargs):
        raise ConnectionError("the cache is away")

    monkeypatch.setattr("plumbing.generations.caches", {"keys": type("Away", (), {"get": away})()})
    with CaptureQueriesContext(connection) as queries:
        _push(agent)
    reads = [q["sql"] for q in queries.captured_queries]
    assert sum('FROM "auth_group"' in sql for sql in reads) == 2  # the groups, the channels
    assert sum('FROM "rules_ruleset"' in sql for sql in reads) == 1  # the revision


@pytest.mark.e2e  # another process
def test_a_member_removed_in_another_process_is_not_emailed(agent, fiona, finance):
    """The other process shares the ``keys`` cache, where the groups' generation is."""
    assert _channels(_push(agent)) == {"email"}
    # Removed behind this process's back (no signal here: as another process would).
    User.groups.through.objects.filter(user=fiona).delete()
    assert _channels(_push(agent)) == {"email"}  # this process has not heard of it yet
    shared = {
        k: str(settings.CACHES["keys"][k])
        for k in ("LOCATION", "KEY_PREFIX")
        if k in settings.CACHES["keys"]
    }
    code = (
        "from django.conf import settings; import django; "
        f"settings.CACHES['keys'].update({shared!r}); django.setup(); "
        "from approvals.group_cache import groups_changed; groups_changed()"
    )
    subprocess.run(
        [sys.executable, "-c", code],
        check=True,
        cwd=Path(__file__).resolve().parents[2],
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "impri.settings"},
        timeout=60,
    )
    assert _channels(_push(agent)) == set()
