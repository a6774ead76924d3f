"""Who a reviewer is at the company's identity provider: the single sign-on link.

The table was made by ``approvals`` (migration 0008) and keeps its name and rows: the model
moved here with ``SeparateDatabaseAndState`` (identity 0001, approvals 0015), Django's
state only.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


class SsoIdentity(models.Model):
    """A person at the identity provider (issuer + ``sub``) and the Impri user they sign in as.

    Users are linked by this pair, never by a username or an e-mail the provider
    sends later: both can change, and matching on them would let one person
    take over another's account.
    """

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="sso_identities"
    )
    issuer = models.CharField(max_length=500)
    subject = models.CharField(max_length=255)
    created_at = models.DateTimeField(default=timezone.now)
    last_login_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "approvals_ssoidentity"  # made by approvals 0008; moved in state only
        verbose_name = "SSO identity"
        verbose_name_plural = "SSO identities"
        constraints = [
            models.UniqueConstraint(fields=["issuer", "subject"], name="sso_identity_unique")
        ]

    def __str__(self) -> str:
        return f"{self.subject} at {self.issuer} → {self.user}"
