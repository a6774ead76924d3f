"""Errors as the operator sees them: the exit code and the first line, each saying what to do."""

from __future__ import annotations

import os
import re
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.live import Deployment

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def deployment():
    made = Deployment()
    made.impri("migrate", "--no-input")
    yield made
    made.close()


def first_line(done: subprocess.CompletedProcess) -> str:
    return (done.stderr.strip().splitlines() or [""])[0]


def test_a_password_prompt_without_a_terminal_names_the_other_ways(deployment):
    done = subprocess.run(
        [sys.executable, "-m", "impri", "createreviewer", "rita", "--password-prompt"],
        env=deployment.env,
        stdin=subprocess.DEVNULL,  # docker exec without -t, CI
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    line = first_line(done)
    assert "--password-file" in line and "IMPRI_REVIEWER_PASSWORD" in line, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr  # no traceback


def test_a_port_in_use_says_which_and_how_to_choose_another(deployment):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = deployment.impri(
            "serve", "--port", str(port), "--no-migrate", check=False, IMPRI_BASE_URL="http://x"
        )
    assert done.returncode == 2, done.stderr
    line = first_line(done)
    assert f"127.0.0.1:{port}" in line, done.stderr
    assert "--port" in line and "IMPRI_PORT" in line, done.stderr
    assert "listening" not in (done.stderr + done.stdout).lower().replace("cannot listen", "")
    assert "Traceback" not in done.stderr and "CRITICAL" not in done.stderr


@pytest.mark.parametrize(
    ("command", "text"),
    [
        (("rules", "import"), "rules:\n  - name: small refunds\n    when: amount: 5\n"),
        (("gateway", "import"), "gateways:\n  - name: pay\n    url: http://x: y\n"),
    ],
)
def test_a_yaml_syntax_error_gives_file_line_column_and_the_line(
    deployment, tmp_path, command, text
):
    path = tmp_path / "broken.yaml"
    path.write_text(text)
    done = deployment.impri(*command, str(path), check=False)
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines[0].startswith(f"CommandError: {path}: line 3, column "), done.stderr
    assert "not YAML" in lines[0]
    offending = text.splitlines()[2]
    assert lines[1] == "    " + offending, done.stderr
    column = int(lines[0].split("column ")[1].split(":")[0])
    assert lines[2] == " " * (4 + column - 1) + "^", done.stderr
    assert offending[column - 1] == ":"
    assert "rule '(file)'" not in done.stderr


def test_routine_commands_keep_system_check_warnings_for_long_running_ones(deployment):
    # IMPRI_HOST beyond loopback without IMPRI_BASE_URL: impri.W001.
    assert "impri.W001" in deployment.impri("check", IMPRI_HOST="0.0.0.0").stderr
    deployment.impri("createreviewer", "quiet")
    done = deployment.impri("token", "quiet", IMPRI_HOST="0.0.0.0")
    assert "W001" not in done.stderr and "System check" not in done.stderr
    # Django's own commands run the checks: an error stops them, the warnings stay quiet.
    done = deployment.impri("migrate", "--no-input", IMPRI_HOST="0.0.0.0")
    assert "W001" not in done.stderr + done.stdout, done.stderr


def test_every_deployment_warning_is_quiet_in_one_shot_commands():
    """A new ``impri.W`` check joins the list one-shot commands silence."""
    from django.conf import settings

    root = Path(__file__).resolve().parents[2]
    found = set()
    for package in root.iterdir():
        if package.name == "tests" or not (package / "__init__.py").exists():
            continue
        for path in package.rglob("*.py"):
            found.update(re.findall(r'id="(impri\.W\d+)"', path.read_text(encoding="utf-8")))
    assert found and found == set(settings.IMPRI_DEPLOYMENT_WARNINGS)


def test_audit_verify_on_a_missing_table_is_a_broken_verdict():
    gone = Deployment()
    try:
        gone.impri("migrate", "--no-input")
        if gone.db_name:
            import psycopg

            with psycopg.connect(gone.env["DATABASE_URL"], autocommit=True) as conn:
                conn.execute("DROP TABLE audit_auditevent CASCADE")
        else:
            with sqlite3.connect(gone.data_dir / "impri.sqlite3") as conn:
                conn.execute("DROP TABLE audit_auditevent")
        done = gone.impri("audit", "verify", check=False)
        assert done.returncode == 1, done.stderr
        assert first_line(done).startswith("BROKEN: the audit log cannot be read ("), done.stderr
        assert "audit_auditevent" in first_line(done)
        assert "Traceback" not in done.stderr
    finally:
        gone.close()


@pytest.mark.skipif(not os.environ.get("REDIS_URL"), reason="impri worker needs REDIS_URL")
@pytest.mark.skipif(os.geteuid() != 0, reason="the root warning shows only as root")
def test_a_worker_run_as_root_says_so_in_one_line_instead_of_celerys_warning(deployment):
    worker = subprocess.Popen(
        [sys.executable, "-m", "impri", "worker"],
        env=deployment.env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines = []
    for line in worker.stderr:
        lines.append(line)
        if "ready." in line:
            break
    worker.terminate()
    worker.communicate(timeout=30)
    text = "".join(lines)
    assert "warning: impri worker runs as root; run it as an unprivileged user" in text, text
    assert "superuser privileges" not in text, text


def test_a_normal_start_says_it_listens_once_and_nothing_of_daphnes_info(deployment):
    server = deployment.start_server()
    output = server.output()
    assert output.count("Impri is listening on ") == 1, output
    assert "HTTP/2" not in output and "Configuring endpoint" not in output, output
    assert "Starting server at" not in output and "Listening on TCP address" not in output
