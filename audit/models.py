from __future__ import annotations

import copy
import hashlib
from datetime import UTC

from django.db import models

from .canonical import CURRENT_SCHEME, canonical_json, canonical_json_v1, v1_respellings

__all__ = ["CURRENT_SCHEME", "canonical_json", "canonical_json_v1"]

GENESIS_HASH = "0" * 64


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
    # How the hash is computed (see hashed_fields); events before scheme 2 keep 1.
    scheme = models.PositiveSmallIntegerField(default=1)
    at = models.DateTimeField()
    actor_type = models.CharField(max_length=10, choices=ActorType.choices)
    # actor_id is the display name at the time (an agent's name, a username);
    # actor_ref the stable identity behind it ("agent:7", "user:3"), empty for
    # rules and the system.
    actor_id = models.CharField(max_length=200)
    actor_ref = models.CharField(max_length=64, blank=True, default="")
    action_id = models.CharField(max_length=40, blank=True, db_index=True)
    event = models.CharField(max_length=60)
    data = models.JSONField(default=dict)
    prev_hash = models.CharField(max_length=64)
    hash = models.CharField(max_length=64, unique=True)

    objects = AuditEventQuerySet.as_manager()

    class Meta:
        ordering = ["seq"]
        permissions = [
            (
                "audit_log",
                "Can read the whole audit log and checkpoints, and run full verification",
            )
        ]

    def __str__(self) -> str:
        return f"#{self.seq} {self.event} {self.action_id}"

    def hashed_fields(self) -> dict:
        if self.scheme == 1:
            return self._hashed_fields_v1()
        return {"seq": self.seq, "at": format_at(self.at), **self._content_fields()}

    def _content_fields(self) -> dict:
        """The current scheme's hashed fields but the two the chain's lock assigns."""
        return {
            "scheme": self.scheme,
            "actor_type": self.actor_type,
            "actor_id": self.actor_id,
            "actor_ref": self.actor_ref,
            "action_id": self.action_id,
            "event": self.event,
            "data": self.data,
        }

    def _hashed_fields_v1(self) -> dict:
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
        """SHA-256 of the previous hash and the event's canonical encoding under its scheme."""
        encode = canonical_json_v1 if self.scheme == 1 else canonical_json
        return hashlib.sha256(
            self.prev_hash.encode("ascii") + encode(self.hashed_fields())
        ).hexdigest()

    def hash_matches(self) -> bool:
        """Does the stored event hash to its ``hash``?

        A scheme-1 event is also accepted in the spelling it had before
        PostgreSQL rewrote its numbers (see ``canonical.v1_respellings``).
        """
        if self.compute_hash() == self.hash:
            return True
        if self.scheme != 1:
            return False
        prefix = self.prev_hash.encode("ascii")
        fields = copy.deepcopy(self.hashed_fields())
        return any(
            hashlib.sha256(prefix + body).hexdigest() == self.hash
            for body in v1_respellings(fields)
        )


class ChainHead(models.Model):
    """A single row that every append locks first, so the chain never forks."""

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    seq = models.BigIntegerField(default=0)
    hash = models.CharField(max_length=64, default=GENESIS_HASH)

    def __str__(self) -> str:
        return f"chain head at #{self.seq}"


class VerificationRun(models.Model):
    """One verification of the chain: a routine one, one against a caller's checkpoint, or a full one.

    A successful run pins ``to_hash`` at ``to_seq`` and is signed like a
    checkpoint (HMAC, with a key that is not in the database), so the next
    routine verification starts there and costs only the events after it.
    Full runs are queued here and run in the background.
    """

    class Kind(models.TextChoices):
        ROUTINE = "routine"
        CHECKPOINT = "checkpoint"
        FULL = "full"

    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        DONE = "done"

    kind = models.CharField(max_length=10, choices=Kind.choices)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.DONE)
    requested_by = models.CharField(max_length=200, blank=True)
    requested_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    ok = models.BooleanField(null=True)
    checked = models.BigIntegerField(default=0)
    first_broken_seq = models.BigIntegerField(null=True, blank=True)
    problem = models.TextField(blank=True)
    from_seq = models.BigIntegerField(default=0)
    to_seq = models.BigIntegerField(default=0)
    to_hash = models.CharField(max_length=64, blank=True)
    signature = models.CharField(max_length=64, blank=True)

    class Meta:
        indexes = [models.Index(fields=["ok", "-to_seq"], name="audit_verif_ok_seq")]

    def __str__(self) -> str:
        return f"{self.kind} verification #{self.pk}: {self.status} ok={self.ok}"

    @property
    def at(self):
        """When the run finished (what metrics and the admin index report)."""
        return self.finished_at
