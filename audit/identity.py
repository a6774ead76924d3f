"""Stable identities, and the changes to people and agents that the log records.

An event names its actor twice: ``actor_id`` is the display name at the time
(an agent's name, a username), ``actor_ref`` the identity behind it
(``agent:<pk>``, ``user:<pk>``) that a rename never changes.

Changes to agents, users, group memberships, permissions and notification
settings are recorded from model signals, so admin, the shell and commands
are all covered. Who made the change comes from the request being served
(:class:`ActorMiddleware`), else it is the system.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import transaction
from django.db.models.signals import m2m_changed, post_delete, post_save, pre_save

from plumbing.middleware import DualModeMiddleware

from . import log
from .models import ActorType

_request: ContextVar = ContextVar("impri_audit_request", default=None)
# A change made by a system on the person's behalf (``"oidc"``: the identity provider).
_source: ContextVar = ContextVar("impri_audit_source", default=None)


def agent_ref(agent) -> str:
    return f"agent:{agent.pk}"


def user_ref(user) -> str:
    return f"user:{user.pk}"


class ActorMiddleware(DualModeMiddleware):
    """Remember the request being served, so a signal knows which person made a change."""

    def __call__(self, request):
        if self.is_async:
            return self._acall(request)
        token = _request.set(request)
        try:
            return self.get_response(request)
        finally:
            _request.reset(token)

    async def _acall(self, request):
        token = _request.set(request)
        try:
            return await self.get_response(request)
        finally:
            _request.reset(token)


@contextmanager
def acting_as(user):
    """Attribute the changes made in the block to ``user`` (commands, tests)."""

    class _Stub:
        pass

    stub = _Stub()
    stub.user = user
    token = _request.set(stub)
    try:
        yield
    finally:
        _request.reset(token)


@contextmanager
def changes_from(source: str):
    """Attribute the changes made in the block to ``source`` (e.g. ``"oidc"``), recorded in each
    event's data, whoever's request is being served."""
    token = _source.set(source)
    try:
        yield
    finally:
        _source.reset(token)


def current_actor() -> dict:
    source = _source.get()
    if source:
        return {"actor_type": ActorType.SYSTEM, "actor_id": source, "actor_ref": ""}
    request = _request.get()
    user = getattr(request, "user", None) if request is not None else None
    if user is not None and getattr(user, "is_authenticated", False):
        return {
            "actor_type": ActorType.REVIEWER,
            "actor_id": user.get_username(),
            "actor_ref": user_ref(user),
        }
    return {"actor_type": ActorType.SYSTEM, "actor_id": "system", "actor_ref": ""}


def _record(event: str, data: dict) -> None:
    source = _source.get()
    if source:
        data = {**data, "source": source}
    with transaction.atomic():
        log.record(event, **current_actor(), data=data)


# --- Agents ---------------------------------------------------------------------------


def _before(sender, instance, fields: tuple[str, ...]) -> None:
    """Keep the stored values of ``fields`` on the instance, to compare after the save."""
    old = None
    if instance.pk is not None:
        old = sender._default_manager.filter(pk=instance.pk).values(*fields).first()
    instance._audit_before = old


def agent_pre_save(sender, instance, update_fields=None, raw=False, **kwargs):
    if raw:
        return
    _before(sender, instance, ("name", "is_active", "webhook_secret"))


def agent_post_save(sender, instance, created, raw=False, **kwargs):
    if raw:
        return
    old = getattr(instance, "_audit_before", None)
    subject = {"agent": instance.name, "agent_ref": agent_ref(instance)}
    if created or old is None:
        _record("agent.created", subject)
        return
    if old["name"] != instance.name:
        _record("agent.renamed", {**subject, "from": old["name"], "to": instance.name})
    if old["is_active"] != instance.is_active:
        _record("agent.deactivated" if not instance.is_active else "agent.reactivated", subject)
    if old["webhook_secret"] != instance.webhook_secret:
        _record("agent.webhook_secret_rotated", subject)  # never the secret itself


# --- Users, groups, permissions ---------------------------------------------------------

USER_FLAGS = {
    "is_active": ("user.reactivated", "user.deactivated"),
    "is_superuser": ("user.superuser_granted", "user.superuser_revoked"),
    "is_staff": ("user.staff_granted", "user.staff_revoked"),
}


def user_pre_save(sender, instance, update_fields=None, raw=False, **kwargs):
    if raw:
        return
    if update_fields is not None and set(update_fields) <= {"last_login", "password"}:
        instance._audit_before = "skip"
        return
    _before(sender, instance, ("username", *USER_FLAGS))


def user_post_save(sender, instance, created, raw=False, **kwargs):
    if raw:
        return
    old = getattr(instance, "_audit_before", None)
    if old == "skip":
        return
    subject = {"user": instance.get_username(), "user_ref": user_ref(instance)}
    if created or old is None:
        flags = {flag: getattr(instance, flag) for flag in USER_FLAGS}
        _record("user.created", {**subject, **flags})
        return
    if old["username"] != instance.get_username():
        _record("user.renamed", {**subject, "from": old["username"], "to": subject["user"]})
    for flag, (granted, revoked) in USER_FLAGS.items():
        if old[flag] != getattr(instance, flag):
            _record(granted if getattr(instance, flag) else revoked, subject)


def _users_and_names(instance, reverse: bool, pk_set, model) -> tuple[list, list[str]]:
    """(users, names of the other side) for an m2m change seen from either end."""
    User = get_user_model()
    if not reverse:  # user.groups.add(group): instance is the user
        names = sorted(str(o) for o in model._default_manager.filter(pk__in=pk_set or ()))
        return [instance], names
    return list(User._default_manager.filter(pk__in=pk_set or ())), [str(instance)]


def groups_changed(sender, instance, action, reverse, model, pk_set, **kwargs):
    _membership_changed("user.groups_changed", "groups", instance, action, reverse, model, pk_set)


def permissions_changed(sender, instance, action, reverse, model, pk_set, **kwargs):
    _membership_changed(
        "user.permissions_changed", "permissions", instance, action, reverse, model, pk_set
    )


def _membership_changed(event, what, instance, action, reverse, model, pk_set):
    if action == "pre_clear":
        # Who is about to lose what: a clear gives no pk_set after the fact.
        if reverse:
            instance._audit_cleared = list(instance.user_set.all())
        else:
            instance._audit_cleared = list(getattr(instance, what).all())
        return
    if action not in ("post_add", "post_remove", "post_clear"):
        return
    if action == "post_clear":
        cleared = getattr(instance, "_audit_cleared", [])
        if reverse:
            users, names = cleared, [str(instance)]
        else:
            users, names = [instance], sorted(str(o) for o in cleared)
    else:
        users, names = _users_and_names(instance, reverse, pk_set, model)
    change = "added" if action == "post_add" else "removed"
    for user in users:
        if names:
            _record(
                event,
                {"user": user.get_username(), "user_ref": user_ref(user), change: names},
            )


def group_permissions_changed(sender, instance, action, reverse, model, pk_set, **kwargs):
    if action not in ("post_add", "post_remove") or reverse or not pk_set:
        return
    names = sorted(str(p) for p in model._default_manager.filter(pk__in=pk_set))
    change = "added" if action == "post_add" else "removed"
    _record("group.permissions_changed", {"group": instance.name, change: names})


def sso_identity_saved(sender, instance, created, raw=False, **kwargs):
    if raw or not created:
        return
    user = instance.user
    _record(
        "user.sso_linked",
        {
            "user": user.get_username(),
            "user_ref": user_ref(user),
            "issuer": instance.issuer,
            "subject": instance.subject,
            # identity.sso says how it linked the person; otherwise an admin did it by hand.
            "how": getattr(instance, "_audit_how", "admin"),
        },
    )


def sso_identity_deleted(sender, instance, **kwargs):
    user = instance.user
    _record(
        "user.sso_unlinked",
        {
            "user": user.get_username(),
            "user_ref": user_ref(user),
            "issuer": instance.issuer,
            "subject": instance.subject,
        },
    )


# --- Notification settings ---------------------------------------------------------------

NOTIFICATION_FIELDS = ("email_enabled", "extra_emails", "slack_webhook_url", "reminder_every_s")


def notifications_pre_save(sender, instance, raw=False, **kwargs):
    if raw:
        return
    _before(sender, instance, NOTIFICATION_FIELDS)


def notifications_post_save(sender, instance, created, raw=False, **kwargs):
    if raw:
        return
    old = getattr(instance, "_audit_before", None) or {}
    changed = sorted(f for f in NOTIFICATION_FIELDS if old.get(f) != getattr(instance, f))
    if not changed and not created:
        return
    data = {"group": instance.group.name, "changed": changed}
    if "slack_webhook_url" in changed:
        # A webhook URL is a credential: record that it changed, not what it is.
        data["slack_webhook_url_set"] = bool(instance.slack_webhook_url)
    for field in ("email_enabled", "extra_emails", "reminder_every_s"):
        if field in changed:
            data[field] = getattr(instance, field)
    _record("notifications.changed", data)


def connect() -> None:
    """Audit admin changes to users, groups and permissions (``audit.apps``)."""
    User = get_user_model()
    pre_save.connect(user_pre_save, sender=User, dispatch_uid="audit-user-pre")
    post_save.connect(user_post_save, sender=User, dispatch_uid="audit-user-post")
    m2m_changed.connect(groups_changed, sender=User.groups.through, dispatch_uid="audit-groups")
    m2m_changed.connect(
        permissions_changed, sender=User.user_permissions.through, dispatch_uid="audit-perms"
    )
    m2m_changed.connect(
        group_permissions_changed, sender=Group.permissions.through, dispatch_uid="audit-gperms"
    )


def connect_agents_and_notifications(
    agent_model, notification_settings_model, sso_identity_model
) -> None:
    """Audit admin changes to agents, groups' notification settings and SSO links.

    Called by ``approvals.apps`` with its own models: the audit app never imports
    the approvals app, which builds on it.
    """
    pre_save.connect(agent_pre_save, sender=agent_model, dispatch_uid="audit-agent-pre")
    post_save.connect(agent_post_save, sender=agent_model, dispatch_uid="audit-agent-post")
    post_save.connect(sso_identity_saved, sender=sso_identity_model, dispatch_uid="audit-sso-link")
    post_delete.connect(
        sso_identity_deleted, sender=sso_identity_model, dispatch_uid="audit-sso-unlink"
    )
    pre_save.connect(
        notifications_pre_save, sender=notification_settings_model, dispatch_uid="audit-notif-pre"
    )
    post_save.connect(
        notifications_post_save,
        sender=notification_settings_model,
        dispatch_uid="audit-notif-post",
    )
