"""Prometheus: ``impri_ledger_movements_total{state}`` and ``impri_ledger_exceptions{state}``,
computed from the database at scrape time, like the business figures in ops/metrics.py."""

from __future__ import annotations

from django.db.models import Count
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from . import selectors
from .models import EXCEPTIONS, Movement, State


class LedgerCollector:
    def describe(self):
        return []

    def collect(self):
        movements = CounterMetricFamily(
            "impri_ledger_movements",
            "Movements recorded from the payment processor, by their state now.",
            labels=["state"],
        )
        counts = dict(
            Movement.objects.order_by()
            .values_list("state")
            .annotate(n=Count("pk"))
            .values_list("state", "n")
        )
        for state in State.values:
            movements.add_metric([state], counts.get(state, 0))
        yield movements
        exceptions = GaugeMetricFamily(
            "impri_ledger_exceptions",
            "Open reconciliation exceptions (docs/reconciliation.md), by state.",
            labels=["state"],
        )
        open_ = selectors.summary()["exceptions"]
        for state in EXCEPTIONS:
            exceptions.add_metric([state], open_.get(state, 0))
        yield exceptions
