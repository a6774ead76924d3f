from __future__ import annotations

import hashlib
import json
from datetime import UTC

from django.db import models

GENESIS_HASH = "0" * 64


def canonical_json(value) -> bytes:
    """The byte encoding that event hashes are computed over (see docs/audit.md)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode(
        "utf-8"
    )


def format_at(at) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class ActorType(models.TextChoices):
    AGENT = "agent"
    REVIEWER = "reviewer"
    RULE = "rule"
    SYSTEM = "system"


class AuditEventQuerySet(models.QuerySet):
    def for_action(self, action_id: str):
        return self.filter(action_id=action_id).order_by("seq")


class AuditEvent(models.Model):
    """One append-only, hash-chained entry. Nothing updates or deletes these rows."""

    seq = models.BigIntegerField(primary_key=True)
    at = models.DateTimeField()
    actor_type = models.CharField(max_length=10, choices=ActorType.choices)
    actor_id = models.CharField(max_length=200)
    action_id = models.CharField(max_length=40, blank=True, db_index=True)
    event = models.CharField(max_length=60)
    data = models.JSONField(default=dict)
    prev_hash = models.CharField(max_length=64)
    hash = models.CharField(max_length=64, unique=True)

    objects = AuditEventQuerySet.as_manager()

    class Meta:
        ordering = ["seq"]

    def __str__(self) -> str:
        return f"#{self.seq} {self.event} {self.action_id}"

    def hashed_fields(self) -> dict:
        return {
            "seq": self.seq,
            "at": format_at(self.at),
            "actor_type": self.actor_type,
            "actor_id": self.actor_id,
            "action_id": self.action_id,
            "event": self.event,
            "data": self.data,
        }

    def compute_hash(self) -> str:
        return hashlib.sha256(
            self.prev_hash.encode("ascii") + canonical_json(self.hashed_fields())
        ).hexdigest()


class ChainHead(models.Model):
    """A single row that every append locks first, so the chain never forks."""

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    seq = models.BigIntegerField(default=0)
    hash = models.CharField(max_length=64, default=GENESIS_HASH)

    def __str__(self) -> str:
        return f"chain head at #{self.seq}"


class ChainVerification(models.Model):
    """The outcome of the latest full verify (one row): what metrics and the admin report.

    Written by every verify (``impri audit verify``, ``GET /audit/verify`` and
    the periodic one), so a replica that never verified itself still reports
    the last result.
    """

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    at = models.DateTimeField()
    ok = models.BooleanField()
    checked = models.BigIntegerField(default=0)
    first_broken_seq = models.BigIntegerField(null=True, blank=True)
    problem = models.TextField(blank=True)

    class Meta:
        verbose_name = "latest chain verification"

    def __str__(self) -> str:
        verdict = "intact" if self.ok else f"BROKEN at #{self.first_broken_seq}"
        return f"chain {verdict} ({self.checked} events, {self.at:%Y-%m-%d %H:%M} UTC)"
