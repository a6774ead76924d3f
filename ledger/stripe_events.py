"""Stripe's webhook: the signature checked with Stripe's own library, the events read.

``POST /integrations/stripe/events``: a body whose ``Stripe-Signature`` verifies against one
of ``IMPRI_STRIPE_WEBHOOK_SECRET``'s secrets (tolerance 300 s) is read; anything else is
a 400. An event id is recorded once (``ProcessorEvent``); a replay is answered 200 and
changes nothing. Refunds are recorded by their ``re_`` id; a charge by its payment intent
when it has one (``charge.succeeded`` and ``payment_intent.succeeded`` of one payment are
one movement), else its ``ch_`` id.
"""

from __future__ import annotations

import datetime as dt
import json

import stripe
from django.conf import settings
from django.db import transaction

from . import services
from .services import Incoming

TOLERANCE_S = 300
SOURCE = "stripe"
REFUND_EVENTS = ("refund.created", "refund.updated", "refund.failed")
CHARGE_EVENTS = ("charge.succeeded", "payment_intent.succeeded")
RECORDED = (*REFUND_EVENTS, "charge.refunded", *CHARGE_EVENTS)


class BadSignature(Exception):
    pass


def verify(payload: bytes, header: str) -> dict:
    """The event, once its signature verifies against one of the configured secrets."""
    secrets = settings.IMPRI_STRIPE_WEBHOOK_SECRET
    if not secrets:
        raise BadSignature("no IMPRI_STRIPE_WEBHOOK_SECRET is configured")
    if not header:
        raise BadSignature("no Stripe-Signature header")
    text = payload.decode("utf-8", errors="replace")
    last = "no secret matched"
    for secret in secrets:
        try:
            stripe.WebhookSignature.verify_header(text, header, secret, tolerance=TOLERANCE_S)
        except stripe.SignatureVerificationError as exc:
            last = str(exc)
            continue
        try:
            event = json.loads(text)
        except ValueError:
            raise BadSignature("the body is not JSON") from None
        if not isinstance(event, dict) or not isinstance(event.get("data"), dict):
            raise BadSignature("the body is not a Stripe event")
        return event
    raise BadSignature(last)


def _when(seconds) -> dt.datetime:
    return dt.datetime.fromtimestamp(int(seconds or 0), tz=dt.UTC)


def _metadata(obj: dict) -> dict:
    metadata = obj.get("metadata")
    return metadata if isinstance(metadata, dict) else {}


def refund(obj: dict, created: int) -> Incoming:
    return Incoming(
        source=SOURCE,
        external_id=str(obj["id"]),
        kind="refund",
        amount_minor=obj["amount"],
        currency=str(obj.get("currency") or "").upper(),
        occurred_at=_when(obj.get("created") or created),
        reference=str(obj.get("charge") or obj.get("payment_intent") or ""),
        metadata=_metadata(obj),
        processor_status=str(obj.get("status") or "succeeded"),
        event_created=created,
    )


def charge(obj: dict, created: int, *, intent: bool) -> Incoming:
    if intent:
        external, reference = obj["id"], obj.get("latest_charge") or ""
        amount = obj.get("amount_received") or obj.get("amount")
    else:
        external = obj.get("payment_intent") or obj["id"]
        reference, amount = obj["id"], obj.get("amount_captured") or obj.get("amount")
    return Incoming(
        source=SOURCE,
        external_id=str(external),
        kind="charge",
        amount_minor=amount,
        currency=str(obj.get("currency") or "").upper(),
        occurred_at=_when(obj.get("created") or created),
        reference=str(reference or ""),
        metadata=_metadata(obj),
        processor_status="succeeded",
        event_created=created,
    )


def incoming(event: dict) -> list[Incoming]:
    """The movements an event reports (none for a type the ledger ignores)."""
    kind = event.get("type")
    obj = event["data"].get("object") or {}
    created = int(event.get("created") or 0)
    if kind in REFUND_EVENTS:
        return [refund(obj, created)]
    if kind == "charge.refunded":
        refunds = (obj.get("refunds") or {}).get("data") or []
        found = []
        for item in refunds:
            if not item.get("metadata") and _metadata(obj):
                item = {**item, "metadata": _metadata(obj)}
            found.append(refund(item, created))
        return found
    if kind in CHARGE_EVENTS:
        return [charge(obj, created, intent=kind == "payment_intent.succeeded")]
    return []


def receive(payload: bytes, header: str) -> tuple[str, int]:
    """Verify and record one delivery; ``(what happened, movements recorded)``."""
    event = verify(payload, header)
    kind = str(event.get("type") or "")
    if kind not in RECORDED:
        return "ignored", 0
    found = incoming(event)  # a malformed object fails here, before the id is kept
    with transaction.atomic():  # the id is kept only with the movements it brought
        if services.seen_event(SOURCE, str(event.get("id") or ""), kind):
            return "replay", 0
        for item in found:
            services.record_movement(item)
    return "recorded", len(found)
