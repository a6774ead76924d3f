"""`impri worker` loads what its jobs need, and starts Celery's worker as Celery's command would.

docs/benchmarks.md, "The scaled stack's idle footprint": the worker runs without daphne's
and ninja's apps, without the checks of the pages (URLs, templates, admin), without
Celery's command line, and its task modules load the MCP SDK and pywebpush only when a
job needs them.
"""

from __future__ import annotations

import pytest
from celery.apps.worker import Worker
from celery.bin.celery import celery as celery_command

from impri.management.commands.worker import worker_arguments
from plumbing.celery import app
from tests.project.test_beat import modules_at_start

# Loaded by serve's pages or by one job when it runs, never needed to start a worker.
NOT_IN_AN_IDLE_WORKER = (
    "twisted",
    "daphne",
    "ninja",
    "mcp",
    "pywebpush",
    "aiohttp",
    "prompt_toolkit",
    "celery.bin.celery",
    "impri.urls",
    "agent_doors.api",
    "agent_doors.mcp",
    "inbox.views",
)


class Started(Exception):
    """Raised instead of building the worker: carries what it was given."""


@pytest.mark.parametrize("concurrency", [None, 3])
def test_the_worker_is_built_with_the_arguments_of_celerys_command_line(monkeypatch, concurrency):
    def capture(self, *args, **kwargs):
        raise Started(kwargs)

    monkeypatch.setattr(Worker, "__init__", capture)
    argv = ["worker", "--pool=threads"]
    if concurrency:
        argv.append(f"--concurrency={concurrency}")
    celery_command.params[0].default = app  # as app.worker_main does
    try:
        with pytest.raises(Started) as by_celery:
            celery_command.main(args=argv, standalone_mode=False)
    finally:
        celery_command.params[0].default = None
    assert worker_arguments(app, concurrency) == by_celery.value.args[0]


@pytest.mark.e2e  # a process of its own: the console script's path to Celery's worker
def test_an_idle_worker_loads_its_tasks_and_not_the_pages(tmp_path):
    # SQLite, and a broker that is not there: the worker stops before it would connect.
    done, loaded = modules_at_start(
        tmp_path,
        "celery.worker:WorkController.start",
        "worker",
        IMPRI_DATA_DIR=str(tmp_path / "data"),
        REDIS_URL="redis://127.0.0.1:1/0",
    )
    assert "Impri worker: data directory" in done.stderr
    for task_module in ("approvals.tasks", "delivery.tasks", "gateway.tasks", "webpush.tasks"):
        assert task_module in loaded, task_module
    assert [name for name in NOT_IN_AN_IDLE_WORKER if name in loaded] == []
