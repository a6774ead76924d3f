"""`impri beat` sends the schedule's tasks by name, without Django's apps.

Beat puts timed messages on the broker and nothing else: it imports no model, no task
module and no MCP SDK, publishes no grant key and never connects to the database
(docs/benchmarks.md, "The scaled stack's idle footprint").
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from celery.apps.beat import Beat
from celery.bin.celery import celery as celery_command
from django.conf import settings

from impri import schedule
from impri.management.commands.beat import beat_app, run_beat

ROOT = Path(__file__).resolve().parents[2]
# Loaded by the apps, never needed to send a message by name.
NOT_IN_BEAT = (
    "django.db.models",
    "django.contrib.admin",
    "approvals.models",
    "approvals.grants",
    "approvals.tasks",
    "delivery.tasks",
    "mcp",
    "ninja",
    "pydantic",
    "twisted",
    "daphne",
    "psycopg",
)


def clean_env(**env: str) -> dict[str, str]:
    """This process's environment without its Impri configuration, plus ``env``."""
    kept = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("IMPRI_", "DJANGO_"))
        and k not in ("SECRET_KEY", "DATABASE_URL", "REDIS_URL")
    }
    return {**kept, "PYTHONPATH": str(ROOT), **env}


def test_beats_app_knows_the_schedule_and_no_task_module():
    app = beat_app()
    assert app.conf.beat_schedule == settings.CELERY_BEAT_SCHEDULE
    assert app.conf.broker_url == settings.CELERY_BROKER_URL
    assert app.conf.broker_transport_options == settings.CELERY_BROKER_TRANSPORT_OPTIONS
    assert not app.fixups  # Celery's Django fix-up would call django.setup() at start
    assert not app.configured or app.conf.imports == ()  # no task module to import


def test_beat_runs_as_celerys_command_line_runs_it(monkeypatch, tmp_path):
    built: list[Beat] = []
    monkeypatch.setattr(Beat, "run", lambda self: built.append(self))
    app = beat_app()
    schedule = tmp_path / "celerybeat-schedule"
    celery_command.params[0].default = app  # as app.start does
    try:
        celery_command.main(args=["beat", f"--schedule={schedule}"], standalone_mode=False)
    finally:
        celery_command.params[0].default = None
    run_beat(app, schedule)
    by_celery, ours = ({k: v for k, v in vars(b).items() if k != "colored"} for b in built)
    assert ours == by_celery


def modules_at_start(
    tmp_path: Path, stop_at: str, command: str, **env: str
) -> tuple[subprocess.CompletedProcess, set[str]]:
    """Run ``impri <command>`` until ``stop_at`` (``module:Class.method``) and return what it imported.

    The method is replaced by one that writes ``sys.modules`` and exits: the process stops
    where its loop would start, before it connects to the broker.
    """
    module, _, attribute = stop_at.partition(":")
    owner, _, method = attribute.rpartition(".")
    dump = tmp_path / "modules.txt"
    code = (
        f"import sys, {module}\n"
        "def stop(self, *args, **kwargs):\n"
        f"    open({str(dump)!r}, 'w').write('\\n'.join(sorted(sys.modules)))\n"
        "    raise SystemExit(0)\n"
        f"{module}.{owner}.{method} = stop\n"
        "from impri.cli import main\n"
        f"main([{command!r}])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=clean_env(IMPRI_PROCESS_ROLE=command, **env),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done, set(dump.read_text().split())


@pytest.mark.e2e  # a process of its own: the console script's path to Celery beat
def test_beat_starts_without_the_apps_the_database_or_a_grant_key(tmp_path):
    # Neither Redis nor PostgreSQL is reachable: beat touches neither before its first tick.
    done, loaded = modules_at_start(
        tmp_path,
        "celery.beat:Service.start",
        "beat",
        IMPRI_DATA_DIR=str(tmp_path / "data"),
        REDIS_URL="redis://127.0.0.1:1/0",
        DATABASE_URL="postgres://impri@127.0.0.1:1/impri",
        SECRET_KEY="beat-test",
    )
    assert done.stderr.startswith(
        "Impri beat: data directory "
        f"{tmp_path / 'data'}; database PostgreSQL impri@127.0.0.1:1/impri; channel layer Redis"
    ), done.stderr
    assert "grant signing key" not in done.stderr
    assert "celery.apps.beat" in loaded
    assert [name for name in NOT_IN_BEAT if name in loaded] == []
    assert not (tmp_path / "data" / "grant-keys").exists()


@pytest.mark.e2e
@pytest.mark.skipif(not os.environ.get("REDIS_URL"), reason="impri beat needs REDIS_URL")
def test_beat_sends_due_tasks_by_name_to_the_broker(tmp_path):
    import redis

    # Its own keys in REDIS_URL's database (IMPRI_REDIS_PREFIX): a queue no worker of the
    # suite reads, whatever else runs beside it.
    prefix = f"beat-{secrets.token_hex(6)}:"
    broker = redis.Redis.from_url(os.environ["REDIS_URL"])
    beat = subprocess.Popen(
        [sys.executable, "-m", "impri", "beat"],
        env=clean_env(
            IMPRI_DATA_DIR=str(tmp_path),
            REDIS_URL=os.environ["REDIS_URL"],
            IMPRI_REDIS_PREFIX=prefix,
            IMPRI_TICK_S="0.5",
            IMPRI_LOG_LEVEL="WARNING",
        ),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        sent: set[str] = set()
        due = {job.task for job in schedule.JOBS if job.every == "IMPRI_TICK_S"}
        while not due <= sent and time.monotonic() < deadline and beat.poll() is None:
            for raw in broker.lrange(f"{prefix}celery", 0, -1):
                message = json.loads(raw)
                sent.add(message["headers"]["task"])
                assert json.loads(base64.b64decode(message["body"]))[:2] == [[], {}]
            time.sleep(0.2)
        assert due <= sent, (sent, beat.poll())
        assert sent <= {job.task for job in schedule.JOBS}
    finally:
        if beat.poll() is None:
            os.killpg(beat.pid, signal.SIGTERM)
        out = beat.communicate(timeout=30)[0].decode(errors="replace")
        for key in broker.scan_iter(f"{prefix}*"):
            broker.delete(key)
    assert "Traceback" not in out, out
    assert (tmp_path / "celerybeat-schedule").exists() or list(tmp_path.glob("celerybeat-*"))
