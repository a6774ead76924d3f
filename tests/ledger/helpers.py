"""Stripe events signed as Stripe signs them, and approved actions to hold them against."""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import time

from django.test import Client

from approvals import services
from tests.factories import install_rules, make_action, refund

SECRET = "whsec_test_ledger_secret"
_ids = itertools.count(1)


def sign(payload: str, secret: str = SECRET, at: int | None = None) -> str:
    """Stripe's scheme: HMAC-SHA256 over ``f"{t}.{payload}"``, sent as ``t=...,v1=...``."""
    t = int(time.time()) if at is None else at
    mac = hmac.new(secret.encode(), f"{t}.{payload}".encode(), hashlib.sha256).hexdigest()
    return f"t={t},v1={mac}"


def event(type_: str, obj: dict, *, event_id: str | None = None, created: int | None = None):
    return {
        "id": event_id or f"evt_{next(_ids)}",
        "object": "event",
        "type": type_,
        "created": created if created is not None else int(time.time()),
        "data": {"object": obj},
    }


def refund_obj(re_id: str, amount: int, currency: str = "usd", **extra) -> dict:
    return {
        "id": re_id,
        "object": "refund",
        "amount": amount,
        "currency": currency,
        "charge": "ch_1",
        "status": "succeeded",
        "created": int(time.time()),
        "metadata": {},
        **extra,
    }


def deliver(body: dict, *, secret: str = SECRET, at: int | None = None, header=None):
    payload = json.dumps(body)
    sig = sign(payload, secret, at) if header is None else header
    return Client().post(
        "/integrations/stripe/events",
        payload,
        content_type="application/json",
        headers={"Stripe-Signature": sig},
    )


def approved_refund(agent, reviewer, cents: int = 8400, **overrides):
    """A refund of ``cents`` USD, approved by ``reviewer`` (rules declare its money)."""
    install_rules()
    action = make_action(agent, **{**refund(cents), **overrides})
    return services.decide(action.pk, by=reviewer, verdict="approve")


def executed(action, agent, reference: str | None = None):
    return services.report_result(action.pk, agent=agent, status="executed", reference=reference)
