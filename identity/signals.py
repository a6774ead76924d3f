"""The key check's cache (``identity.keys``) forgets every key when a key, agent or user changes.

A checked key carries its agent or user (``is_active``, ``is_superuser``, the webhook
secret…): any save or delete of the three models starts a new generation. Writes through
``QuerySet.update`` send no signal; the services that make them call ``keys_changed``
themselves (``revoke_key``, ``rotate_webhook_secret``).
"""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from approvals.models import Agent, ApiKey

from .keys import keys_changed

# Saves of these fields alone change nothing a key check answers.
_BOOKKEEPING = frozenset({"last_login", "last_used_at"})


@receiver(post_save, sender=ApiKey)
@receiver(post_save, sender=Agent)
@receiver(post_save, sender=get_user_model())
def _saved(sender, instance, update_fields=None, using="default", **kwargs) -> None:
    if update_fields is not None and set(update_fields) <= _BOOKKEEPING:
        return
    keys_changed(using)


@receiver(post_delete, sender=ApiKey)
@receiver(post_delete, sender=Agent)
@receiver(post_delete, sender=get_user_model())
def _deleted(sender, instance, using="default", **kwargs) -> None:
    keys_changed(using)
