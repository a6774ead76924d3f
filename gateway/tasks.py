"""The scheduled refresh of upstream tool lists (Celery beat in scaled mode, the ticker embedded)."""

from __future__ import annotations

import logging
from datetime import timedelta

from asgiref.sync import async_to_sync
from celery import shared_task
from django.db.models import Q
from django.utils import timezone

from . import pins, services
from .models import Upstream

logger = logging.getLogger(__name__)

REFRESH_EVERY_S = 300


def refresh_due(now=None) -> int:
    """Ask each enabled upstream not asked for ``REFRESH_EVERY_S`` for its tools; returns how many answered.

    A tool that changed or appeared since its definitions were pinned is held
    for an operator's review (``gateway/pins.py``); an upstream that does not
    answer is recorded for ``/readyz``.
    """
    now = now or timezone.now()
    cutoff = now - timedelta(seconds=REFRESH_EVERY_S)
    due = Upstream.objects.filter(enabled=True).filter(
        Q(last_checked_at__isnull=True) | Q(last_checked_at__lte=cutoff)
    )
    rows = list(due)
    if not rows:
        return 0
    # The MCP client SDK (and its HTTP stack) is loaded by the first refresh that asks an
    # upstream, not by every worker at start: most deployments run no gateway.
    # deferred: the MCP SDK: an idle worker never loads it (tests/project/test_footprint.py)
    from . import upstream

    answered = 0
    for row in rows:
        try:
            tools = async_to_sync(upstream.list_tools)(upstream.Target.of(row))
        except upstream.UpstreamRefused as exc:  # it answered: up, but would not list
            logger.warning("gateway %s: the upstream refused to list its tools: %s", row.name, exc)
            services.record_state(row.name)
            continue
        except upstream.UpstreamError as exc:
            logger.warning("gateway %s: %s", row.name, exc)
            services.record_state(row.name, str(exc))
            continue
        dumped = upstream.dump_tools(tools)
        services.record_state(row.name, "", dumped)
        pins.observe(row.name, dumped)  # a change is held and recorded, never taken
        answered += 1
    return answered


@shared_task
def refresh_tools() -> int:
    return refresh_due()
