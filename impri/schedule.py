"""The periodic jobs: one table that Celery beat and the embedded ticker both read.

Scaled mode sends each job's task by name on beat's schedule; embedded mode's
ticker (``impri.ticker``) imports the same task and calls it in-process, on
the job's loop. ``tests/project/test_schedule.py`` fails if either runs a job this
table does not list.

Pure data on purpose: settings.py builds ``CELERY_BEAT_SCHEDULE`` from it, so
it imports no app, and an interval is the *name* of the setting that holds
it (seconds; 0 switches the job off in both schedulers).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

# The ticker's loops, each a task of its own so that none delays another:
# "state" changes actions' state when a deadline passes (quick database work,
# never network I/O); "delivery" hands outbox rows to the delivery lanes and
# runs the housekeeping (a long prune or verify never delays an expiry);
# "gateway" asks upstream MCP servers for their tools (one that hangs delays
# nothing else).
LOOPS = ("state", "delivery", "gateway")


@dataclass(frozen=True)
class Job:
    name: str  # the beat entry's key
    task: str  # the Celery task's dotted path (its registered name)
    every: str  # the setting that holds the interval in seconds
    loop: str  # the ticker loop that runs it (one of LOOPS)
    first_after_s: float = 0  # the ticker's first run, after its start (not during it)


JOBS = (
    Job("expire-overdue", "approvals.tasks.expire_overdue", "IMPRI_TICK_S", "state"),
    Job("escalate-overdue", "approvals.tasks.escalate_overdue", "IMPRI_SLOW_TICK_S", "state"),
    Job("send-reminders", "approvals.tasks.send_reminders", "IMPRI_SLOW_TICK_S", "state"),
    Job(
        "flag-stale-approvals", "approvals.tasks.flag_stale_approvals", "IMPRI_SLOW_TICK_S", "state"
    ),
    Job(
        "audit-full-verifications",
        "audit.tasks.run_full_verifications",
        "IMPRI_SLOW_TICK_S",
        "state",
    ),
    Job("deliver-webhooks", "delivery.tasks.deliver_webhooks", "IMPRI_TICK_S", "delivery"),
    Job("send-notifications", "delivery.tasks.send_notifications", "IMPRI_TICK_S", "delivery"),
    Job(
        "deliver-slack-messages",
        "slackapp.tasks.deliver_slack_messages",
        "IMPRI_TICK_S",
        "delivery",
    ),
    Job("deliver-pushes", "webpush.tasks.deliver_pushes", "IMPRI_TICK_S", "delivery"),
    Job("ledger-unsettled", "ledger.tasks.sweep_unsettled", "IMPRI_SLOW_TICK_S", "state"),
    Job("ledger-notices", "ledger.tasks.send_notices", "IMPRI_TICK_S", "delivery"),
    Job(
        "prune-history",
        "delivery.tasks.prune_history",
        "IMPRI_HOUSEKEEPING_EVERY_S",
        "delivery",
        first_after_s=60,
    ),
    Job(
        "verify-audit-chain",
        "audit.tasks.verify_audit_chain",
        "IMPRI_AUDIT_VERIFY_EVERY_S",
        "delivery",
        first_after_s=60,
    ),
    Job("refresh-gateway-tools", "gateway.tasks.refresh_tools", "IMPRI_SLOW_TICK_S", "gateway"),
)


def interval(job: Job, settings) -> float:
    """The job's interval in seconds, read from ``settings`` (a module, or a mapping)."""
    if isinstance(settings, Mapping):
        return settings[job.every]
    return getattr(settings, job.every)


def beat(settings) -> dict[str, dict]:
    """``CELERY_BEAT_SCHEDULE``: every job that is switched on, under its name."""
    return {
        job.name: {"task": job.task, "schedule": interval(job, settings)}
        for job in JOBS
        if interval(job, settings)
    }
