"""Grant signing keys published to the database: replicas verify each other's grants.

A "replica" here is what one is to the database: the same code with another data
directory, so another generated key (approvals/grants.py). tests/core/test_replica_keys.py
runs two real `impri serve` processes on PostgreSQL.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from django.contrib.auth.models import User
from django.core import checks
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.utils import timezone

from approvals import grants
from approvals.models import GrantSigningKey
from audit.models import AuditEvent
from tests.project.test_metrics import TOKEN, samples, scrape

pytestmark = pytest.mark.django_db


@pytest.fixture
def replica(settings, tmp_path):
    """Switch this process to the data directory of replica ``n`` (its own generated key)."""

    def become(n: int) -> str:
        settings.DATA_DIR = tmp_path / f"replica-{n}"
        grants.forget_keys()
        return grants.publish()

    yield become
    grants.forget_keys()


def warnings() -> list[str]:
    return [m.id for m in checks.run_checks() if m.id == "impri.W003"]


def test_each_replica_publishes_its_key_and_every_jwks_lists_both(replica):
    one = replica(1)
    assert replica(1) == one  # publishing again changes nothing
    assert GrantSigningKey.objects.count() == 1
    signed_by_one = grants.sign({"act": "act_x", "payload_sha256": "0", "jti": "j", "exp": 1})
    assert grants.several_keys_problem() is None and warnings() == []

    two = replica(2)
    assert two != one
    kids = [k["kid"] for k in grants.jwks()["keys"]]
    assert kids[0] == two and one in kids and len(kids) == 2
    # Replica 2 knows replica 1's key: a grant replica 1 signed verifies here.
    assert grants.verifying_keys()[one] is not None
    public = grants.verifying_keys()[jwt.get_unverified_header(signed_by_one)["kid"]]
    assert jwt.decode(signed_by_one, public, algorithms=["EdDSA"], options={"verify_exp": False})


def test_two_signing_keys_warn_in_the_check_readyz_metrics_and_admin(replica, settings):
    replica(1)
    replica(2)
    assert warnings() == ["impri.W003"]
    ready = Client().get("/readyz").json()
    assert ready["status"] == "ok"
    assert ready["grant_signing_keys"]["count"] == 2
    assert "IMPRI_GRANT_SIGNING_KEY_FILE" in ready["grant_signing_keys"]["warning"]
    settings.IMPRI_METRICS_TOKEN = TOKEN
    assert samples(scrape())["impri_grant_signing_keys", ()] == 2
    admin = Client()
    admin.force_login(User.objects.create_superuser("olivia", "o@example.com", "x" * 16))
    html = admin.get("/admin/").content.decode()
    assert '<td data-ops="grant-keys">2: <strong>2 different grant signing keys' in html
    assert "impri grantkey new" in html


def _idle(kid: str) -> None:
    """As if the process that published ``kid`` stopped two days ago."""
    long_ago = timezone.now() - timedelta(days=2)
    GrantSigningKey.objects.filter(kid=kid).update(last_published_at=long_ago)


def test_retiring_the_other_key_leaves_one_and_the_warning_goes(replica):
    one = replica(1)
    two = replica(2)
    out = io.StringIO()
    call_command("grantkey", "list", stdout=out)
    assert f"{two}  signing (this process)" in out.getvalue()
    _idle(one)
    call_command("grantkey", "retire", "--", one, stderr=io.StringIO())
    assert [k["kid"] for k in grants.jwks()["keys"]] == [two]
    assert warnings() == [] and Client().get("/readyz").json()["grant_signing_keys"] == {"count": 1}
    assert AuditEvent.objects.get(event="grant.key_retired").data == {"kid": one}
    with pytest.raises(CommandError, match="this process signs with"):
        call_command("grantkey", "retire", "--", two)


def test_a_retired_key_is_never_published_again_not_even_by_a_restart_that_has_it(replica, caplog):
    one = replica(1)
    replica(2)
    _idle(one)
    call_command("grantkey", "retire", "--", one, stderr=io.StringIO())
    # Replica 1 starts again with its key still configured: it publishes nothing and says why.
    with pytest.raises(grants.KeyRefused, match="never published again"):
        replica(1)
    grants.forget_keys()
    grants.publish_at_start()  # what serve and the worker call
    assert "was retired (impri grantkey retire)" in caplog.text
    assert "IMPRI_GRANT_SIGNING_KEY_FILE" in caplog.text
    assert GrantSigningKey.objects.get(kid=one).retired_at is not None
    assert one not in [k["kid"] for k in grants.jwks()["keys"]]
    # Its new grants do not verify anywhere, here included; the operator is told.
    grant = grants.sign({"act": "act_x", "payload_sha256": "0", "jti": "j", "exp": 1})
    assert grants.verifying_keys().get(jwt.get_unverified_header(grant)["kid"]) is None
    assert "was retired" in (grants.several_keys_problem() or "")
    assert warnings() == ["impri.W003"]


def test_retiring_a_key_a_live_process_uses_is_refused_unless_forced(
    replica, django_capture_on_commit_callbacks
):
    one = replica(1)
    # A running replica 1 signs a grant: it notes the key on its row (after the commit).
    with django_capture_on_commit_callbacks(execute=True):
        grants.sign({"act": "act_x", "payload_sha256": "0", "jti": "j", "exp": 1})
    assert GrantSigningKey.objects.get(kid=one).last_signed_at is not None
    replica(2)
    with pytest.raises(CommandError, match=r"in use by a running process .* IMPRI_KEY_LIVE_S"):
        call_command("grantkey", "retire", "--", one)
    assert GrantSigningKey.objects.get(kid=one).retired_at is None
    assert one in [k["kid"] for k in grants.jwks()["keys"]]
    # Published long ago, but signed with a minute ago: still in use.
    _idle(one)
    GrantSigningKey.objects.filter(kid=one).update(
        last_signed_at=timezone.now() - timedelta(minutes=1)
    )
    with pytest.raises(CommandError, match="--force"):
        call_command("grantkey", "retire", "--", one)
    call_command("grantkey", "retire", "--force", "--", one, stderr=io.StringIO())
    assert one not in [k["kid"] for k in grants.jwks()["keys"]]
    assert AuditEvent.objects.get(event="grant.key_retired").data == {"kid": one, "forced": True}


def test_a_key_idle_for_longer_than_key_live_s_retires_without_force(replica, settings):
    settings.IMPRI_KEY_LIVE_S = 60
    one = replica(1)
    replica(2)
    GrantSigningKey.objects.filter(kid=one).update(
        last_published_at=timezone.now() - timedelta(seconds=61),
        last_signed_at=timezone.now() - timedelta(seconds=61),
    )
    call_command("grantkey", "retire", "--", one, stderr=io.StringIO())
    assert GrantSigningKey.objects.get(kid=one).retired_at is not None


def test_a_rotated_key_still_verifies_but_no_longer_counts_as_signing(replica):
    old = replica(1)
    call_command("grantkey", "rotate", stdout=io.StringIO(), stderr=io.StringIO())
    new = grants.signing_key().kid
    assert {k["kid"] for k in grants.jwks()["keys"]} == {old, new}
    assert grants.keys_signing() == [new]


def test_grantkey_new_prints_a_key_that_can_be_given_to_every_process(settings, tmp_path):
    out = io.StringIO()
    call_command("grantkey", "new", stdout=out)
    key = serialization.load_pem_private_key(out.getvalue().encode(), password=None)
    path = tmp_path / "grant_key"
    path.write_text(out.getvalue())
    settings.IMPRI_GRANT_SIGNING_KEY_FILE = str(path)
    grants.forget_keys()
    try:
        assert grants.signing_key().private.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        ) == key.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )
        assert grants.publish() == grants.signing_key().kid
        assert GrantSigningKey.objects.get().source.startswith("IMPRI_GRANT_SIGNING_KEY_FILE=")
    finally:
        grants.forget_keys()


@pytest.mark.e2e  # a process of its own: the console script, before Django is set up
def test_impri_grantkey_new_runs_before_the_settings_with_no_database(tmp_path):
    """The README's secrets step: no data directory, no database, Django's apps not loaded."""
    script = Path(sys.executable).parent / "impri"
    env = {"PATH": os.environ["PATH"], "IMPRI_DATA_DIR": str(tmp_path / "absent")}
    done = subprocess.run(
        [str(script), "grantkey", "new"], capture_output=True, text=True, timeout=60, env=env
    )
    assert done.returncode == 0, done.stderr
    serialization.load_pem_private_key(done.stdout.encode(), password=None)
    assert not (tmp_path / "absent").exists()


@pytest.mark.django_db(transaction=True)  # "published" counts once the publishing commits
def test_a_process_that_could_not_publish_at_start_publishes_before_its_first_grant(replica):
    replica(1)
    GrantSigningKey.objects.all().delete()  # as if it started before `impri migrate`
    grants.forget_keys()
    kid = grants.signing_key().kid
    grants.sign({"act": "act_x", "payload_sha256": "0", "jti": "j", "exp": 1})
    assert list(GrantSigningKey.objects.values_list("kid", flat=True)) == [kid]
    GrantSigningKey.objects.all().delete()
    grants.sign({"act": "act_y", "payload_sha256": "0", "jti": "k", "exp": 1})  # once: no query
    assert not GrantSigningKey.objects.exists()
