"""One schedule: Celery beat and the embedded ticker run exactly the jobs of impri/schedule.py."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from impri import schedule, ticker

TICKER_SOURCE = Path(ticker.__file__).read_text()


def ran_by_ticker(hours: float = 2.0) -> set[str]:
    """The job names the ticker's loops run over ``hours`` of ticks, each loop with its clock."""
    ran = set()
    for loop in schedule.LOOPS:
        jobs, next_runs, now = ticker.jobs_on(loop), {}, 0.0
        while now < hours * 3600:
            ran |= {job.name for job in ticker.due(jobs, now, next_runs)}
            now += 0.5
    return ran


def app_imports(source: str) -> set[str]:
    """The modules a ticker source imports that are not the schedule, Django, or the standard
    library: where a job the table does not list would come from."""
    allowed = ("__future__", "asyncio", "logging", "time", "channels", "django", "twisted")
    found = set()
    for node in ast.walk(ast.parse(source)):
        names = (
            [node.module or ""]
            if isinstance(node, ast.ImportFrom)
            else [a.name for a in node.names]
            if isinstance(node, ast.Import)
            else []
        )
        for name in names:
            if name.split(".")[0] not in allowed and name not in ("impri", "impri.schedule"):
                found.add(name)
    return found


def test_beat_runs_exactly_the_table(settings):
    table = {
        job.name: {"task": job.task, "schedule": getattr(settings, job.every)}
        for job in schedule.JOBS
    }
    beat = settings.CELERY_BEAT_SCHEDULE
    assert beat == table


def test_a_job_switched_off_is_off_in_beat_and_the_ticker(settings):
    settings.IMPRI_AUDIT_VERIFY_EVERY_S = 0
    assert "verify-audit-chain" not in schedule.beat(settings)
    assert "verify-audit-chain" not in ran_by_ticker()


def test_the_ticker_runs_exactly_the_table():
    assert ran_by_ticker() == {job.name for job in schedule.JOBS}
    assert {job.loop for job in schedule.JOBS} == set(schedule.LOOPS)


def test_the_ticker_runs_jobs_only_from_the_table():
    assert app_imports(TICKER_SOURCE) == set()


def test_a_sweep_added_to_the_ticker_by_hand_fails_the_check():
    """The check above can fail: a sweep called beside the table's jobs is an app import."""
    by_hand = TICKER_SOURCE.replace(
        "def run_jobs(", "from delivery import retention\n\n\ndef run_jobs(", 1
    )
    assert app_imports(by_hand) == {"delivery"}
    inline = TICKER_SOURCE + "\n\ndef extra():\n    import webpush.tasks\n"
    assert app_imports(inline) == {"webpush.tasks"}


def test_each_job_is_a_registered_celery_task():
    from plumbing.celery import app

    app.loader.import_default_modules()
    assert {job.task for job in schedule.JOBS} <= set(app.tasks)
    assert len({job.name for job in schedule.JOBS}) == len(schedule.JOBS)


def test_the_slow_jobs_wait_their_interval_and_housekeeping_its_first_minute(settings):
    settings.IMPRI_TICK_S, settings.IMPRI_SLOW_TICK_S = 2, 15
    state, delivery, runs = ticker.jobs_on("state"), ticker.jobs_on("delivery"), {}
    names = lambda jobs: [job.name for job in jobs]  # noqa: E731
    assert names(ticker.due(state, 1000.0, runs)) == [job.name for job in state]
    assert names(ticker.due(state, 1002.0, runs)) == ["expire-overdue"]
    assert names(ticker.due(state, 1015.0, runs)) == [job.name for job in state]
    runs = {}
    assert "prune-history" not in names(ticker.due(delivery, 1000.0, runs))
    assert "prune-history" not in names(ticker.due(delivery, 1059.0, runs))
    assert {"prune-history", "verify-audit-chain"} <= set(names(ticker.due(delivery, 1060.0, runs)))


@pytest.mark.django_db(transaction=True)
def test_the_ticker_calls_each_jobs_task_in_process(settings):
    settings.IMPRI_SLACK_BOT_TOKEN = ""
    done = ticker.run_jobs(list(schedule.JOBS))
    assert set(done) == {job.name for job in schedule.JOBS}  # none raised
    assert done["expire-overdue"] == 0 and done["deliver-webhooks"] == 0
