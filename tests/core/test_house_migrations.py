"""Models that changed app in the house's second pass keep their rows (approvals 0013, impri 0002).

``GrantSigningKey`` was the project's model (``impri``); the roof owns no model now
and the key is ``approvals``'. The database is taken back to before the move,
keys are published as the old code published them, and after the upgrade the
same rows must be there, read through the model's new home, with the same table.
"""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("approvals", "0012_action_money"), ("impri", "0001_initial")]
AFTER = [
    ("approvals", "0013_grantsigningkey_from_impri"),
    ("impri", "0002_grantsigningkey_to_approvals"),
]


def _migrate(targets):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


def test_grant_signing_keys_published_before_the_move_are_there_after_it():
    apps = _migrate(BEFORE)
    try:
        Old = apps.get_model("impri", "GrantSigningKey")
        now = timezone.now()
        Old.objects.create(kid="kid-signing", jwk={"kty": "OKP", "crv": "Ed25519", "x": "AA"})
        Old.objects.create(
            kid="kid-rotated",
            jwk={"kty": "OKP", "crv": "Ed25519", "x": "BB"},
            source="/data/grant.key",
            superseded_at=now,
        )

        apps = _migrate(AFTER)
        with pytest.raises(LookupError):
            apps.get_model("impri", "GrantSigningKey")  # the roof owns no model any more
        New = apps.get_model("approvals", "GrantSigningKey")
        assert New._meta.db_table == "impri_grantsigningkey"
        got = {
            k.kid: (k.jwk["x"], k.source, k.superseded_at is not None) for k in New.objects.all()
        }
        assert got == {
            "kid-signing": ("AA", "", False),
            "kid-rotated": ("BB", "/data/grant.key", True),
        }
    finally:
        _migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())


def test_the_current_model_reads_the_table_the_project_made():
    from approvals.models import GrantSigningKey

    assert GrantSigningKey._meta.app_label == "approvals"
    assert GrantSigningKey._meta.db_table == "impri_grantsigningkey"
    with connection.cursor() as cursor:
        tables = connection.introspection.table_names(cursor)
    assert "impri_grantsigningkey" in tables
    assert "approvals_grantsigningkey" not in tables


SSO_BEFORE = [("approvals", "0014_issued_grants_key_last_signed"), ("identity", None)]
SSO_AFTER = [
    ("approvals", "0015_ssoidentity_to_identity"),
    ("identity", "0001_ssoidentity_from_approvals"),
]


def test_sso_links_made_before_identity_took_the_model_are_there_after_it():
    """approvals 0015 / identity 0001: state only; the table, its rows and content type stay."""
    executor = MigrationExecutor(connection)
    executor.migrate(SSO_BEFORE)  # identity None: before its first migration
    apps = executor.loader.project_state([SSO_BEFORE[0]]).apps
    try:
        User = apps.get_model("auth", "User")
        Old = apps.get_model("approvals", "SsoIdentity")
        ContentType = apps.get_model("contenttypes", "ContentType")
        ContentType.objects.filter(model="ssoidentity").delete()
        old_type = ContentType.objects.create(app_label="approvals", model="ssoidentity")
        rita = User.objects.create(username="rita")
        Old.objects.create(user=rita, issuer="https://idp.example", subject="0042")
        tables = connection.introspection.table_names()

        apps = _migrate(SSO_AFTER)
        with pytest.raises(LookupError):
            apps.get_model("approvals", "SsoIdentity")
        New = apps.get_model("identity", "SsoIdentity")
        assert New._meta.db_table == "approvals_ssoidentity"
        assert connection.introspection.table_names() == tables  # no table made or renamed
        assert list(New.objects.values_list("user__username", "issuer", "subject")) == [
            ("rita", "https://idp.example", "0042")
        ]
        moved = apps.get_model("contenttypes", "ContentType").objects.get(pk=old_type.pk)
        assert (moved.app_label, moved.model) == ("identity", "ssoidentity")
    finally:
        _migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())
