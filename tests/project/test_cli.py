"""The `impri` command as an operator meets it: version, help, refusals, where the data lives."""

from __future__ import annotations

import logging
import os
import sqlite3
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

# Every test here runs `impri` (or python) as a subprocess.
pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]


def clean_env(**env: str) -> dict[str, str]:
    """This process's environment with none of its Impri configuration, plus ``env``."""
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("IMPRI_", "DJANGO_"))
        and k not in ("SECRET_KEY", "DATABASE_URL", "REDIS_URL")
    }
    return {**clean, "PYTHONPATH": str(ROOT), **env}


def impri(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    """Run `python -m impri` with none of this process's Impri configuration."""
    return subprocess.run(
        [sys.executable, "-m", "impri", *args],
        env=clean_env(**env),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_version_is_impris_own(tmp_path):
    done = impri("--version", cwd=tmp_path, IMPRI_DATA_DIR=str(tmp_path))
    expected = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"impri {expected}"


# `impri ARGS` as the console script runs it, printing at exit the modules it imported.
LISTING = (
    "import atexit, sys;"
    "atexit.register(lambda: print('MODULES', *sys.modules, file=sys.__stderr__));"
    "from impri.cli import main; main()"
)


def _imported(*args: str, cwd: Path, **env: str) -> set[str]:
    """The modules `impri ARGS` imported, once it succeeded."""
    done = subprocess.run(
        [sys.executable, "-c", LISTING, *args],
        env=clean_env(**env),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    listed = [line for line in done.stderr.splitlines() if line.startswith("MODULES ")]
    assert listed, done.stderr[-2000:]
    return set(listed[-1].split()[1:])


def test_a_one_shot_command_loads_no_twisted_and_no_url_conf_the_server_does(tmp_path):
    """Only `runserver` needs daphne's app (Twisted's reactor), and a one-shot command runs
    no system check (the URL check imports every view): each start is a second shorter."""
    data = str(tmp_path / "data")
    assert impri("migrate", "--no-input", cwd=tmp_path, IMPRI_DATA_DIR=data).returncode == 0
    for command in (["agents"], ["createagent", "short-bot"], ["rules", "kinds"]):
        imported = _imported(*command, cwd=tmp_path, IMPRI_DATA_DIR=data)
        assert "django.db.models" in imported, command  # it did set Django up
        assert not {"twisted.internet", "impri.urls"} & imported, command
    assert "impri.urls" in _imported("check", cwd=tmp_path, IMPRI_DATA_DIR=data)  # every check
    shell = impri(
        "shell",
        "-c",
        "from django.apps import apps; print(apps.is_installed('daphne'))",
        cwd=tmp_path,
        IMPRI_DATA_DIR=data,
    )
    assert shell.stdout.split()[-1] == "False", shell.stderr
    # Without a role (manage.py, daphne or uvicorn started directly) and for runserver,
    # daphne's app is installed: runserver is daphne's, which serves the ASGI routes.
    runserver = (
        "import django; django.setup(); from django.core.management import get_commands; "
        "print(get_commands()['runserver'])"
    )
    done = subprocess.run(
        [sys.executable, "-c", runserver],
        env=clean_env(IMPRI_DATA_DIR=data, DJANGO_SETTINGS_MODULE="impri.settings"),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.stdout.split() == ["daphne"], done.stderr[-2000:]
    # daphne's runserver (its --noasgi option), not staticfiles' WSGI one.
    assert "--noasgi" in impri("runserver", "--help", cwd=tmp_path, IMPRI_DATA_DIR=data).stdout


def test_help_lists_impris_commands_before_djangos(tmp_path):
    done = impri("--help", cwd=tmp_path, IMPRI_DATA_DIR=str(tmp_path))
    assert done.returncode == 0, done.stderr
    out = done.stdout
    ours, _, theirs = out.partition("Django's commands")
    for command in (
        "serve",
        "worker",
        "beat",
        "mcp",
        "createagent",
        "token",
        "backup",
        "rules",
        "gateway",
    ):
        assert f"\n  {command} " in ours, command
    assert "migrate" in theirs and "migrate" not in ours
    assert impri("help", cwd=tmp_path, IMPRI_DATA_DIR=str(tmp_path)).stdout == out


def test_worker_and_beat_refuse_without_redis(tmp_path):
    for command in ("worker", "beat"):
        done = impri(command, cwd=tmp_path, IMPRI_DATA_DIR=str(tmp_path))
        assert done.returncode != 0
        assert f"impri {command} needs REDIS_URL" in done.stderr
        assert "Traceback" not in done.stderr


def test_scaled_servers_refuse_to_invent_a_secret_key(tmp_path):
    # Settings are read before any connection: no PostgreSQL is needed to see the refusal.
    url = "postgres://impri@127.0.0.1:1/impri"
    for command in ("serve", "worker", "beat"):
        done = impri(command, cwd=tmp_path, IMPRI_DATA_DIR=str(tmp_path), DATABASE_URL=url)
        assert done.returncode == 2
        assert done.stderr.startswith("impri: SECRET_KEY is not set"), done.stderr
        assert len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "secret_key").exists()


def test_a_bad_setting_is_one_line_not_a_traceback(tmp_path):
    done = impri("check", cwd=tmp_path, IMPRI_DATA_DIR=str(tmp_path), IMPRI_LOG_FORMAT="xml")
    assert done.returncode == 2
    assert done.stderr.strip() == "impri: IMPRI_LOG_FORMAT must be plain or json, not 'xml'"


def test_mcp_elsewhere_refuses_to_create_a_fresh_database(tmp_path):
    done = impri("mcp", cwd=tmp_path, IMPRI_API_KEY="imp_a_" + "x" * 40)
    assert done.returncode == 2
    assert f"no Impri database at {tmp_path / 'impri-data' / 'impri.sqlite3'}" in done.stderr
    assert "IMPRI_DATA_DIR is not set" in done.stderr
    assert done.stdout == ""
    assert list(tmp_path.iterdir()) == []  # no data dir, no secret key, no empty database


def test_mcp_says_which_database_it_serves(tmp_path):
    data = tmp_path / "data"
    env = {"IMPRI_DATA_DIR": str(data)}
    assert impri("migrate", cwd=tmp_path, **env).returncode == 0
    key = impri("createagent", "bot", cwd=tmp_path, **env).stdout.split()[-1]
    # No stdin: the server starts, says where it is, and ends when its input ends.
    done = impri("mcp", cwd=tmp_path / "..", IMPRI_API_KEY=key, **env)
    assert done.returncode == 0, done.stderr
    assert f"data directory {data}; database SQLite {data / 'impri.sqlite3'}" in done.stderr
    assert done.stdout == ""


def test_createagent_prints_the_key_last_and_logs_nothing_on_stdout(tmp_path):
    env = {"IMPRI_DATA_DIR": str(tmp_path), "IMPRI_LOG_LEVEL": "DEBUG"}
    impri("migrate", cwd=tmp_path, **env)
    done = impri("createagent", "bot", cwd=tmp_path, **env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[-1].startswith("imp_a_")
    assert "DEBUG" not in done.stdout


def test_the_worker_is_quiet_about_every_task_at_info(settings):
    # Celery logs each task received/succeeded and beat each task sent: every tick.
    for name in ("celery.app.trace", "celery.worker.strategy", "celery.beat"):
        assert not logging.getLogger(name).isEnabledFor(logging.INFO), name
    assert logging.getLogger("celery.worker.consumer").isEnabledFor(logging.INFO)


def test_backup_is_a_consistent_copy_that_restores(tmp_path):
    data = tmp_path / "data"
    env = {"IMPRI_DATA_DIR": str(data), "SECRET_KEY": "backup-test"}
    assert impri("migrate", cwd=tmp_path, **env).returncode == 0
    assert impri("createagent", "before", cwd=tmp_path, **env).returncode == 0
    # A writer holds an open, uncommitted transaction while the backup runs.
    writer = sqlite3.connect(data / "impri.sqlite3", timeout=20)
    writer.execute("PRAGMA journal_mode=WAL")
    writer.execute("BEGIN IMMEDIATE")
    writer.execute(
        "INSERT INTO approvals_agent (name, description, is_active, webhook_secret, created_at) "
        "VALUES ('uncommitted', '', 1, 's', '2026-01-01')"
    )
    try:
        done = impri("backup", str(tmp_path / "copy.sqlite3"), cwd=tmp_path, **env)
    finally:
        writer.rollback()
        writer.close()
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[-1] == str(tmp_path / "copy.sqlite3")

    # Restore as docs/operations.md says: the copy becomes impri.sqlite3 of a data directory.
    restored = tmp_path / "restored"
    restored.mkdir()
    (tmp_path / "copy.sqlite3").rename(restored / "impri.sqlite3")
    env = {"IMPRI_DATA_DIR": str(restored), "SECRET_KEY": "backup-test"}
    names = impri(
        "shell",
        "--no-imports",
        "-c",
        "from approvals.models import Agent; print(sorted(Agent.objects.values_list('name', flat=True)))",
        cwd=tmp_path,
        **env,
    )
    assert names.stdout.strip() == "['before']", names.stderr
    verify = impri("audit", "verify", cwd=tmp_path, **env)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert impri("createagent", "after", cwd=tmp_path, **env).returncode == 0


def test_backup_of_postgresql_points_to_pg_dump(tmp_path):
    done = impri(
        "backup",
        cwd=tmp_path,
        IMPRI_DATA_DIR=str(tmp_path),
        DATABASE_URL="postgres://x@127.0.0.1:1/x",
    )
    assert done.returncode != 0
    assert "pg_dump" in done.stderr


CLOSED = "postgres://impri@127.0.0.1:9/impri"  # the discard port: nothing listens


def test_waitdb_gives_up_with_one_line_per_attempt(tmp_path):
    done = impri(
        "waitdb", "--timeout", "1", cwd=tmp_path, IMPRI_DATA_DIR=str(tmp_path), DATABASE_URL=CLOSED
    )
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert lines[0].startswith("impri: waiting for the database: OperationalError")
    assert lines[-1].startswith("CommandError: database not reachable after 1s")
    assert "Traceback" not in done.stderr


def test_waitdb_is_ready_at_once_on_sqlite(tmp_path):
    done = impri("waitdb", cwd=tmp_path, IMPRI_DATA_DIR=str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert done.stderr.startswith(f"impri: ready (data directory {tmp_path}")


def start_script(*args: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    """The image's start script, with this environment's `impri` first on PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "impri").write_text(f'#!/bin/sh\nexec {sys.executable} -m impri "$@"\n')
    (bin_dir / "impri").chmod(0o755)
    return impri_like(
        ["sh", str(ROOT / "docker/impri-start"), *args],
        cwd=tmp_path,
        PATH=f"{bin_dir}:{os.environ['PATH']}",
        **env,
    )


def impri_like(argv: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess:
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("IMPRI_", "DJANGO_"))
        and k not in ("SECRET_KEY", "DATABASE_URL", "REDIS_URL")
    }
    return subprocess.run(
        argv,
        env={**clean, "PYTHONPATH": str(ROOT), **env},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_start_script_waits_for_the_database_then_gives_up_in_one_line(tmp_path):
    done = start_script(
        "migrate",
        tmp_path=tmp_path,
        IMPRI_DATA_DIR=str(tmp_path),
        DATABASE_URL=CLOSED,
        IMPRI_DB_WAIT_S="1",
    )
    assert done.returncode == 1
    assert "database not reachable after 1s" in done.stderr.strip().splitlines()[-1]
    assert "Traceback" not in done.stderr


def test_the_start_script_runs_other_commands_without_waiting(tmp_path):
    done = start_script("--version", tmp_path=tmp_path, DATABASE_URL=CLOSED)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("impri ")
