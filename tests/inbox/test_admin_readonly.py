"""Records only the services write are read-only in admin, even for a superuser."""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.contrib.auth.models import User
from django.test import RequestFactory

from approvals.models import Action, Notification, WebhookDelivery
from audit.models import AuditEvent, VerificationRun
from gateway.models import GatedCall
from plumbing.admin import ReadOnlyAdminMixin
from rules.models import BudgetCounter, RuleSet, RuleSetVersion

READ_ONLY = [
    Action,
    AuditEvent,
    VerificationRun,
    WebhookDelivery,
    Notification,
    RuleSet,
    RuleSetVersion,
]
# Read-only, but an operator may delete them (a budget window, a stuck gated call).
DELETABLE = [BudgetCounter, GatedCall]


def superuser_request():
    request = RequestFactory().get("/admin/")
    request.user = User(username="root", is_superuser=True, is_staff=True, is_active=True)
    return request


@pytest.mark.parametrize("model", READ_ONLY + DELETABLE, ids=lambda m: m.__name__)
def test_a_read_only_record_cannot_be_added_or_changed(model):
    model_admin = admin.site._registry[model]
    request = superuser_request()
    assert isinstance(model_admin, ReadOnlyAdminMixin)
    assert model_admin.has_view_permission(request)
    assert not model_admin.has_add_permission(request)
    assert not model_admin.has_change_permission(request)
    assert model_admin.has_delete_permission(request) == (model in DELETABLE)


def test_the_delivery_attempts_inline_is_read_only_too():
    inline = admin.site._registry[WebhookDelivery].inlines[0]
    assert issubclass(inline, ReadOnlyAdminMixin)
