"""Liveness and readiness probes; no key needed."""

from __future__ import annotations

import asyncio
import logging

from channels.layers import get_channel_layer
from django.db import connection
from django.http import JsonResponse

from approvals import grants
from audit.models import AuditEvent, ChainHead
from gateway.services import states as gateway_states
from plumbing.database import database_sync_to_async

logger = logging.getLogger(__name__)


def healthz(request):
    return JsonResponse({"status": "ok"})


def jwks(request):
    """The public keys that verify approval grants (approvals/grants.py); no key needed."""
    response = JsonResponse(grants.jwks())
    response["Cache-Control"] = "public, max-age=300"
    return response


async def readyz(request):
    checks = {"database": await _check_database(), "channel_layer": await _check_layer()}
    if checks["database"] == "ok":
        checks["audit_log"] = await database_sync_to_async(_check_audit_tables)()
    ready = all(value == "ok" for value in checks.values())
    body = {"status": "ok" if ready else "unavailable", "checks": checks}
    if checks["database"] == "ok":
        # Detail only: an unreachable upstream does not take Impri out of service.
        body["gateways"] = await database_sync_to_async(gateway_states)()
        body["grant_signing_keys"] = await database_sync_to_async(_grant_keys)()
    return JsonResponse(body, status=200 if ready else 503)


def _grant_keys() -> dict:
    """Detail only (replicas signing with different keys still verify each other's grants)."""
    detail: dict = {"count": len(grants.keys_signing())}
    problem = grants.several_keys_problem()
    if problem:
        detail["warning"] = problem
    return detail


async def _check_database() -> str:
    def ping():
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return "ok"

    try:
        return await database_sync_to_async(ping)()
    except Exception as exc:
        logger.warning("readyz: database unreachable: %s", exc)
        return f"error: {type(exc).__name__}"


def _check_audit_tables() -> str:
    """The audit chain's tables exist: without them every decision would fail to be recorded."""

    try:
        with connection.cursor() as cursor:
            present = set(connection.introspection.table_names(cursor))
    except Exception as exc:
        logger.warning("readyz: cannot list the database's tables: %s", exc)
        return f"error: {type(exc).__name__}"
    missing = sorted(
        model._meta.db_table
        for model in (AuditEvent, ChainHead)
        if model._meta.db_table not in present
    )
    if missing:
        logger.warning("readyz: the audit log's tables are missing: %s", ", ".join(missing))
        return f"error: missing table {', '.join(missing)}"
    return "ok"


async def _check_layer() -> str:
    layer = get_channel_layer()
    try:
        channel = await asyncio.wait_for(layer.new_channel(), 2)
        await asyncio.wait_for(layer.send(channel, {"type": "ping"}), 2)
        await asyncio.wait_for(layer.receive(channel), 2)
        return "ok"
    except Exception as exc:
        logger.warning("readyz: channel layer unreachable: %s", exc)
        return f"error: {type(exc).__name__}"
