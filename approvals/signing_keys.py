"""What the grants of one deployment keep in the database (``approvals/grants.py``).

``GrantSigningKey``: the public half of each key that signs approval grants. Each
process publishes the key it signs with when it starts, and ``/.well-known/jwks.json``
on any replica serves every published, unretired key, so a grant signed by one
replica verifies against the keys of any other. More than one key that still signs
is a misconfiguration all the same (replicas that should share
``IMPRI_GRANT_SIGNING_KEY_FILE``): the system check, ``/readyz``, ``/metrics`` and the
admin index say so. A retired key stays retired: no process publishes it again.

``IssuedGrant``: the grant an approval was given, stored in the decision's
transaction, so every read of the decision returns these bytes, after a key
rotation too.
"""

from __future__ import annotations

from django.db import models
from django.utils import timezone


class GrantSigningKey(models.Model):
    kid = models.CharField(max_length=64, primary_key=True, help_text="RFC 7638 thumbprint.")
    jwk = models.JSONField(help_text="The public key as a JWK (Ed25519).")
    source = models.CharField(
        max_length=300, blank=True, help_text="Where the process that published it read it."
    )
    published_at = models.DateTimeField(default=timezone.now)
    last_published_at = models.DateTimeField(default=timezone.now)
    superseded_at = models.DateTimeField(
        null=True, blank=True, help_text="Rotated out: no longer signs, still verifies."
    )
    retired_at = models.DateTimeField(
        null=True, blank=True, help_text="Removed from the JWKS (impri grantkey retire)."
    )
    last_signed_at = models.DateTimeField(
        null=True, blank=True, help_text="A running process signed with it (noted once a minute)."
    )

    class Meta:
        # The table it has had since it was the project's model (impri migration 0001).
        db_table = "impri_grantsigningkey"
        verbose_name = "grant signing key"
        ordering = ["published_at", "kid"]

    def __str__(self) -> str:
        return self.kid


class IssuedGrant(models.Model):
    """The grant an approval was given: signed and stored when the decision is made."""

    action = models.OneToOneField(
        "approvals.Action", on_delete=models.CASCADE, primary_key=True, related_name="issued_grant"
    )
    token = models.TextField(help_text="The compact JWS, as every read returns it.")
    kid = models.CharField(max_length=64, help_text="The key that signed it.")
    issued_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"grant of {self.action_id}"
