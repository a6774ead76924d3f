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
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from django.contrib.auth.models import User
from django.core import checks
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

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
    import jwt

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


def test_retiring_the_other_key_leaves_one_and_the_warning_goes(replica):
    one = replica(1)
    two = replica(2)
    out = io.StringIO()
    call_command("grantkey", "list", stdout=out)
    assert f"{two}  signing (this process)" in out.getvalue()
    call_command("grantkey", "retire", "--", one, stderr=io.StringIO())
    assert [k["kid"] for k in grants.jwks()["keys"]] == [two]
    assert warnings() == [] and Client().get("/readyz").json()["grant_signing_keys"] == {"count": 1}
    assert AuditEvent.objects.get(event="grant.key_retired").data == {"kid": one}
    with pytest.raises(CommandError, match="this process signs with"):
        call_command("grantkey", "retire", "--", two)
    # Replica 1 starting again with its key publishes it again: its grants must verify.
    assert replica(1) == one
    assert len(grants.jwks()["keys"]) == 2


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
