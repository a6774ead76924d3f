"""Prometheus metrics at ``/metrics``, behind a bearer token (``IMPRI_METRICS_TOKEN``).

Two kinds of series (docs/metrics.md lists them all):

* **Business figures** are read from the database at scrape time by
  :class:`DatabaseCollector`: actions pushed and settled, time to decision,
  pending and stale actions, the outbox, the audit chain, budgets. Every
  replica answers the same numbers, so they are right however many processes
  serve and whichever one Prometheus scrapes; aggregate them with ``max``,
  never ``sum``.
* **Per-process figures** live in this process's memory: open waits
  (``impri_waiters``), the decision→wake latency (``impri_wake_seconds``) and
  the fail-soft fallbacks (``impri_fallbacks_total``). Scrape every replica
  and ``sum`` them.

Without ``IMPRI_METRICS_TOKEN`` the endpoint does not exist (404).
"""

from __future__ import annotations

import hmac
from collections import defaultdict
from datetime import timedelta

from django.conf import settings
from django.db.models import Count, F, Max, Q, Sum
from django.http import Http404, HttpRequest, HttpResponse
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from approvals import grants
from approvals.models import Action, ActionStatus
from gateway import pins
from plumbing import fallbacks
from plumbing.database import database_sync_to_async
from plumbing.metrics import registry
from rules import services as rule_services
from rules.models import BudgetCounter
from waiting import hub as waiting

from . import status as operator_status

# Seconds from push to a reviewer's decision: minutes to a day.
DECISION_BUCKETS = (10, 30, 60, 300, 900, 1800, 3600, 4 * 3600, 8 * 3600, 86400, 7 * 86400)
# Kinds and budget scopes are chosen by agents: one agent inventing a kind per push must
# not grow Prometheus by a series per push. Past this many values a label's smallest
# ones are summed into OTHER.
MAX_LABEL_VALUES = 100
OTHER = "(other)"


class ProcessCollector:
    """This process's open waits and fail-soft fallbacks."""

    def describe(self):
        return []

    def collect(self):

        yield GaugeMetricFamily(
            "impri_waiters",
            "Per process: agents waiting for a decision right now (REST long-polls and MCP waits).",
            value=waiting.waiting(),
        )
        family = CounterMetricFamily(
            "impri_fallbacks",
            "Per process: times a dependency failed and Impri degraded instead of failing "
            "(cache: the rate limiter counted per process; channel_layer: waiters fell back to "
            "the re-read; broker: a worker nudge was dropped; database: the API answered 503).",
            labels=["component"],
        )
        for component in ("broker", "cache", "channel_layer", "database"):
            family.add_metric([component], fallbacks.counts.get(component, 0))
        for component, count in sorted(fallbacks.counts.items()):
            if component not in ("broker", "cache", "channel_layer", "database"):
                family.add_metric([component], count)
        yield family


class DatabaseCollector:
    """Business figures computed from the database at scrape time (a handful of queries)."""

    def describe(self):
        return []

    def collect(self):
        now = timezone.now()
        yield from actions_pushed()
        yield from actions_settled(now)
        yield from decision_seconds()
        yield from queue(now)
        yield from outbox(now)
        yield from audit_chain()
        yield from budgets(now)
        yield from grant_signing_keys()
        yield from gateway_tools_changed()


registry.register(ProcessCollector())
registry.register(DatabaseCollector())


def actions_pushed():

    family = CounterMetricFamily(
        "impri_actions_pushed",
        f"Actions pushed by agents, by kind (past {MAX_LABEL_VALUES} kinds the rest are {OTHER}).",
        labels=["kind"],
    )
    counts = Action.objects.order_by().values_list("kind").annotate(n=Count("pk"))
    for kind, n in capped(dict(counts)).items():
        family.add_metric([kind], n)
    yield family


def capped(values: dict[str, float], limit: int = MAX_LABEL_VALUES) -> dict[str, float]:
    """The ``limit - 1`` largest values as they are, the rest summed into OTHER."""
    if len(values) <= limit:
        return values
    ranked = sorted(values.items(), key=lambda item: (-item[1], item[0]))
    kept = dict(ranked[: limit - 1])
    kept[OTHER] = sum(value for _, value in ranked[limit - 1 :])
    return kept


def outcome_of(status: str, overdue: bool) -> str:
    """The decision an action got: an executed or failed action was approved first."""
    if overdue:
        return "expired"
    return {"executed": "approved", "failed": "approved"}.get(status, status)


def actions_settled(now):

    settled = CounterMetricFamily(
        "impri_actions_settled",
        "Actions settled, by outcome (approved, rejected, changes_requested, expired, cancelled) "
        "and the rule that "
        "routed them ('' when none matched); an overdue action counts as expired before its sweep.",
        labels=["outcome", "rule"],
    )
    reported = CounterMetricFamily(
        "impri_results_reported",
        "Results agents reported on approved actions, by status (executed, failed).",
        labels=["status"],
    )
    totals: dict[tuple[str, str], int] = defaultdict(int)
    results: dict[str, int] = defaultdict(int)
    rows = (
        Action.objects.order_by()
        .annotate(overdue=Q(status=ActionStatus.PENDING, expires_at__lte=now))
        .values("status", "rule_name", "overdue")
        .annotate(n=Count("pk"))
    )
    for row in rows:
        if row["status"] == ActionStatus.PENDING and not row["overdue"]:
            continue
        totals[outcome_of(row["status"], row["overdue"]), row["rule_name"]] += row["n"]
        if row["status"] in (ActionStatus.EXECUTED, ActionStatus.FAILED):
            results[row["status"]] += row["n"]
    for (outcome, rule), n in sorted(totals.items()):
        settled.add_metric([outcome, rule], n)
    for status in (ActionStatus.EXECUTED, ActionStatus.FAILED):
        reported.add_metric([status], results[status])
    yield settled
    yield reported


def decision_seconds():
    """A histogram of push→decision for actions a reviewer decided, counted in one query."""

    decided = Action.objects.order_by().filter(
        decided_by_user__isnull=False, decided_at__isnull=False
    )
    aggregates = {
        f"le{i}": Count("pk", filter=Q(decided_at__lte=F("created_at") + timedelta(seconds=b)))
        for i, b in enumerate(DECISION_BUCKETS)
    }
    row = decided.aggregate(
        count=Count("pk"), sum=Sum(F("decided_at") - F("created_at")), **aggregates
    )
    total = row["sum"] or timedelta(0)
    buckets = [(str(float(b)), row[f"le{i}"]) for i, b in enumerate(DECISION_BUCKETS)]
    family = HistogramMetricFamily(
        "impri_decision_seconds",
        "Seconds from push to a reviewer's decision (actions a person decided).",
    )
    family.add_metric([], buckets + [("+Inf", row["count"])], sum_value=total.total_seconds())
    yield family


def queue(now):
    figures = operator_status.queue(now)
    yield GaugeMetricFamily(
        "impri_actions_pending",
        "Actions waiting for a reviewer (the queue).",
        value=figures.pending,
    )
    yield GaugeMetricFamily(
        "impri_actions_pending_oldest_seconds",
        "Age of the oldest action waiting for a reviewer (0 when none).",
        value=figures.oldest_pending_s,
    )
    yield GaugeMetricFamily(
        "impri_actions_stale",
        "Approved actions flagged stale: no result reported within IMPRI_REPORT_DEADLINE_S.",
        value=figures.stale,
    )


def outbox(now):
    due = GaugeMetricFamily(
        "impri_outbox_due", "Outbox rows due for delivery now, by lane.", labels=["lane"]
    )
    oldest = GaugeMetricFamily(
        "impri_outbox_oldest_due_seconds",
        "How long the oldest due outbox row has been due, by lane (0 when none).",
        labels=["lane"],
    )
    failing = GaugeMetricFamily(
        "impri_outbox_failing",
        "Outbox rows whose last attempt failed and that are still being retried, by lane.",
        labels=["lane"],
    )
    gave_up = GaugeMetricFamily(
        "impri_outbox_gave_up",
        "Outbox rows given up after a day of failures (kept until IMPRI_RETENTION_DAYS), by lane.",
        labels=["lane"],
    )
    for lane in operator_status.outbox(now):
        due.add_metric([lane.name], lane.due)
        oldest.add_metric([lane.name], lane.oldest_due_s)
        failing.add_metric([lane.name], lane.failing)
        gave_up.add_metric([lane.name], lane.gave_up)
    yield from (due, oldest, failing, gave_up)


def audit_chain():
    head, last = operator_status.chain()
    yield GaugeMetricFamily("impri_audit_events", "Events in the audit chain.", value=head)
    verified = GaugeMetricFamily(
        "impri_audit_chain_ok",
        "1 if the latest full verify found the chain intact, 0 if broken (absent: never verified).",
    )
    at = GaugeMetricFamily(
        "impri_audit_chain_verified_timestamp_seconds",
        "When the latest full verify ran (Unix time).",
    )
    checked = GaugeMetricFamily(
        "impri_audit_chain_verified_events", "Events the latest full verify checked."
    )
    if last is not None:
        verified.add_metric([], 1 if last.ok else 0)
        at.add_metric([], last.at.timestamp())
        checked.add_metric([], last.checked)
    yield from (verified, at, checked)


def gateway_tools_changed():

    held = GaugeMetricFamily(
        "impri_gateway_tools_changed",
        "Upstream tools whose definition changed (or that are new), held until an operator "
        "accepts them, per gateway.",
        labels=["gateway"],
    )
    for name, count in sorted(pins.held_counts().items()):
        held.add_metric([name], float(count))
    yield held


def grant_signing_keys():

    yield GaugeMetricFamily(
        "impri_grant_signing_keys",
        "Keys that sign approval grants in this deployment (more than 1: replicas disagree).",
        value=len(grants.keys_signing()),
    )


def budgets(now):
    """Each budgeted rule's use of its current window, per scope, and its cap."""

    used = GaugeMetricFamily(
        "impri_budget_used",
        "What a budgeted rule has auto-approved in its current window, by rule and scope.",
        labels=["rule", "scope"],
    )
    cap = GaugeMetricFamily(
        "impri_budget_max", "The cap of a budgeted rule per window and scope.", labels=["rule"]
    )
    windows = {}
    for rule in rule_services.current_rules().rules:
        if rule.budget is not None and rule.enabled:
            windows[rule.name] = rule_services.window_start(rule.budget.per, now)
            cap.add_metric([rule.name], float(rule.budget.max))
    if windows:
        current = Q()
        for name, start in windows.items():
            current |= Q(rule=name, window_start=start)
        rows = (
            BudgetCounter.objects.filter(current)
            .order_by()
            .values("rule", "scope")
            .annotate(total=Max("total"))
        )
        by_rule: dict[str, dict[str, float]] = defaultdict(dict)
        for row in rows:
            by_rule[row["rule"]][row["scope"]] = float(row["total"])
        for rule, scopes in by_rule.items():
            for scope, total in capped(scopes).items():
                used.add_metric([rule, scope], total)
    yield from (used, cap)


# --- The endpoint -----------------------------------------------------------------


def _authorized(request: HttpRequest, token: str) -> bool:
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(
        given.strip().encode(), token.encode()
    )


@never_cache
@require_GET
async def metrics_view(request: HttpRequest) -> HttpResponse:
    """The exposition; its queries run through sync_to_async (plumbing.database)."""
    token = settings.IMPRI_METRICS_TOKEN
    if not token:
        raise Http404("metrics are off: set IMPRI_METRICS_TOKEN")
    if not _authorized(request, token):
        response = HttpResponse(
            "a bearer token (IMPRI_METRICS_TOKEN) is needed\n",
            status=401,
            content_type="text/plain",
        )
        response["WWW-Authenticate"] = 'Bearer realm="impri-metrics"'
        return response

    body = await database_sync_to_async(generate_latest)(registry)
    return HttpResponse(body, content_type=CONTENT_TYPE_LATEST)
