"""An operator's mistakes, run as they run them: the exit code and one line saying what to do.

Each test starts the installed ``impri`` console script in a directory of its own with a
clean environment plus the one mistake; none of them may print a traceback.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from approvals.grant_pem import new_pem
from audit.models import AuditEvent, ChainHead
from tests.live import Deployment, free_port

pytestmark = pytest.mark.e2e

IMPRI = Path(sys.executable).parent / "impri"
CLOSED_PG = "postgres://impri@127.0.0.1:9/impri"  # the discard port: nothing listens


def clean_env(tmp_path: Path, **env: str) -> dict[str, str]:
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("IMPRI_", "DJANGO_"))
        and k not in ("DATABASE_URL", "REDIS_URL", "SECRET_KEY")
    }
    return {**base, "IMPRI_DATA_DIR": str(tmp_path / "data"), **env}


def impri(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(IMPRI), *args],
        env=clean_env(tmp_path, **env),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )


def one_line(done: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("garbage", "impri: DATABASE_URL is not a database URL ('garbage'"),
        ("mysql://impri:s3cret@127.0.0.1/impri", "impri: DATABASE_URL: Impri runs on PostgreSQL"),
        ("postgres://impri:s3cret@db:5432", "impri: DATABASE_URL ('postgres://impri:***@db:5432')"),
    ],
)
def test_a_database_url_impri_cannot_use(tmp_path, url, expected):
    done = impri(tmp_path, "migrate", DATABASE_URL=url)
    assert done.returncode == 2
    line = one_line(done)
    assert line.startswith(expected), line
    assert "postgres://USER:PASSWORD@HOST:5432/NAME" in line or "/NAME" in line
    assert "s3cret" not in line  # the password is never echoed


def test_a_missing_secret_key_file(tmp_path):
    done = impri(tmp_path, "migrate", SECRET_KEY_FILE=str(tmp_path / "nope"))
    assert done.returncode == 2
    line = one_line(done)
    assert line.startswith(f"impri: SECRET_KEY_FILE: cannot read {tmp_path / 'nope'}"), line
    assert "No such file or directory" in line and "set SECRET_KEY instead" in line


def test_an_unreadable_secret_key_file(tmp_path):
    secret = tmp_path / "secret_key"
    if os.geteuid() == 0:
        # Root reads any file whatever its mode (and this interpreter lives where another user
        # can't run it): what root cannot read is a directory given for the file.
        secret.mkdir()
        reason = "Is a directory"
    else:
        secret.write_text("a-key-this-user-cannot-read")
        secret.chmod(0)
        reason = "Permission denied"
    done = impri(tmp_path, "migrate", SECRET_KEY_FILE=str(secret))
    assert done.returncode == 2
    line = one_line(done)
    assert line.startswith(f"impri: SECRET_KEY_FILE: cannot read {secret} ({reason})"), line
    assert "a file this user" in line


def test_a_missing_grant_key_file(tmp_path):
    done = impri(tmp_path, "serve", IMPRI_GRANT_SIGNING_KEY_FILE=str(tmp_path / "grant_key"))
    assert done.returncode == 2
    line = one_line(done)
    assert line.startswith("impri: IMPRI_GRANT_SIGNING_KEY_FILE: cannot read"), line


@pytest.mark.parametrize("content", ["not a key\n", "RSA"])
def test_a_grant_key_file_that_is_not_an_ed25519_pem(tmp_path, content):
    key = tmp_path / "grant_key"
    if content == "RSA":
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import rsa

        content = (
            rsa.generate_private_key(public_exponent=65537, key_size=2048)
            .private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
            .decode()
        )
    key.write_text(content)
    done = impri(tmp_path, "serve", IMPRI_GRANT_SIGNING_KEY_FILE=str(key))
    assert done.returncode == 2
    line = one_line(done)
    assert line.startswith(
        f"impri: IMPRI_GRANT_SIGNING_KEY_FILE ({key}) is not an Ed25519 private key in PEM"
    ), line
    assert f"impri grantkey new > {key}" in line


def test_a_good_grant_key_file_is_taken(tmp_path):
    key = tmp_path / "grant_key"
    key.write_text(new_pem())
    done = impri(tmp_path, "grantkey", "list", IMPRI_GRANT_SIGNING_KEY_FILE=str(key))
    assert "IMPRI_GRANT_SIGNING_KEY" not in done.stderr, done.stderr


def test_a_redis_url_that_is_not_one(tmp_path):
    done = impri(tmp_path, "migrate", REDIS_URL="localhost:6379")
    assert done.returncode == 2
    assert one_line(done).startswith("impri: REDIS_URL must be a redis:// URL"), done.stderr


def test_migrate_against_a_postgresql_that_is_not_listening(tmp_path):
    done = impri(tmp_path, "migrate", DATABASE_URL=CLOSED_PG)
    assert done.returncode == 1
    line = one_line(done)
    assert line.startswith(
        "impri: cannot connect to the database (PostgreSQL impri@127.0.0.1:9/"
    ), line
    assert "Connection refused" in line and "DATABASE_URL" in line and "PostgreSQL" in line


def test_a_data_dir_sqlite_cannot_open(tmp_path):
    not_a_folder = tmp_path / "impri-data"
    not_a_folder.write_text("")
    done = impri(tmp_path, "migrate", IMPRI_DATA_DIR=str(not_a_folder), SECRET_KEY="k" * 50)
    assert done.returncode == 1
    line = one_line(done)
    assert line.startswith(f"impri: cannot connect to the database (SQLite {not_a_folder}/"), line
    assert "IMPRI_DATA_DIR" in line


def test_serve_waits_for_an_unreachable_database_then_exits(tmp_path):
    started = time.monotonic()
    done = impri(
        tmp_path, "serve", DATABASE_URL=CLOSED_PG, SECRET_KEY="k" * 50, IMPRI_DB_WAIT_S="2"
    )
    assert done.returncode == 1
    assert "Traceback" not in done.stderr and "psycopg.pool" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    waiting = [line for line in lines if line.startswith("impri: waiting for the database: ")]
    assert len(waiting) >= 2 and len(waiting) == len(lines) - 1, done.stderr
    assert lines[-1].startswith("CommandError: database not reachable after 2s: "), lines[-1]
    assert "IMPRI_DB_WAIT_S" in lines[-1] and "DATABASE_URL" in lines[-1]
    assert time.monotonic() - started < 60  # no pool timeout per attempt


def test_serve_warns_of_an_unreachable_redis_and_a_malformed_base_url(tmp_path):
    port = free_port()
    env = clean_env(
        tmp_path,
        REDIS_URL=f"redis://127.0.0.1:{free_port()}/0",
        IMPRI_BASE_URL="impri.example.com",
        IMPRI_PORT=str(port),
    )
    log = tmp_path / "serve.log"
    with open(log, "w") as out:
        process = subprocess.Popen(
            [str(IMPRI), "serve"], env=env, cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        deadline = time.monotonic() + 90
        while "Impri is listening" not in log.read_text():
            assert process.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)  # a process starting: a bounded poll
        warnings = [line for line in log.read_text().splitlines() if "impri: warning:" in line]
    finally:
        process.terminate()
        process.wait(timeout=20)
    assert len(warnings) == 2, log.read_text()
    assert warnings[0].startswith("impri: warning: Redis at REDIS_URL is not reachable")
    assert "Start Redis or fix REDIS_URL" in warnings[0]
    assert warnings[1].startswith(
        "impri: warning: IMPRI_BASE_URL 'impri.example.com' does not start with http://"
    )


@pytest.fixture
def deployment():
    made = Deployment()
    made.impri("migrate", "--no-input")
    yield made
    made.close()


def drop_audit_table(deployment: Deployment) -> None:
    table = AuditEvent._meta.db_table
    if deployment.db_name:
        import psycopg

        with psycopg.connect(deployment.env["DATABASE_URL"], autocommit=True) as conn:
            conn.execute(f'DROP TABLE "{table}" CASCADE')
    else:
        with sqlite3.connect(deployment.data_dir / "impri.sqlite3") as conn:
            conn.execute(f'DROP TABLE "{table}"')


def test_audit_export_after_a_dropped_table(deployment):
    drop_audit_table(deployment)
    done = deployment.impri("audit", "export", check=False)
    assert done.returncode == 1
    line = one_line(done)
    assert line.startswith("CommandError: the audit log cannot be read ("), line
    assert AuditEvent._meta.db_table in line and "Restore the database" in line


def test_readyz_is_503_when_the_audit_chain_has_no_table(deployment):
    server = deployment.start_server()
    ready = httpx.get(server.url + "/readyz")
    assert ready.status_code == 200, ready.text
    assert ready.json()["checks"]["audit_log"] == "ok"
    drop_audit_table(deployment)
    ready = httpx.get(server.url + "/readyz")
    assert ready.status_code == 503
    checks = ready.json()["checks"]
    assert checks["audit_log"] == f"error: missing table {AuditEvent._meta.db_table}", checks
    assert checks["database"] == "ok"
    assert ChainHead._meta.db_table not in checks["audit_log"]
