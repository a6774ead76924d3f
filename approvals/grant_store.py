"""The grant each approval was given, stored with the decision (``IssuedGrant``).

docs/api.md promises that every read of a decision returns the same grant. Signing
anew on each read would break that after a key rotation (the new key, other bytes),
so the grant is signed once, in the decision's transaction, and stored; reads return
the stored bytes. ``approvals.services.common._announce`` issues it for every
approval (a reviewer's or a rule's), before the webhook written in the same
transaction reads it.
"""

from __future__ import annotations

import jwt

from approvals.models import IssuedGrant

from .grants import claims_for, sign, signing_key


def issue(action) -> str | None:
    """Sign the grant of a decision being made and store it, in the decision's transaction.

    The stored row is cached on ``action`` (``action.issued_grant``), so the webhook written
    in the same transaction reads it without a query.
    """

    claims = claims_for(action)
    if claims is None:
        return None
    token = sign(claims)
    IssuedGrant.objects.create(action=action, token=token, kid=signing_key().kid)
    return token


def grant_for(action) -> str | None:
    """The grant every read of an approved action returns: the one stored with the decision.

    A decision made before grants were stored is signed on its first read and stored
    then; of two first reads at once, the row one of them stores is the one both return.
    """

    if action.decided_at is None or not action.was_approved:
        return None
    try:
        return action.issued_grant.token
    except IssuedGrant.DoesNotExist:
        pass
    token = sign(claims_for(action))
    row, _ = IssuedGrant.objects.get_or_create(
        action_id=action.pk,
        defaults={"token": token, "kid": jwt.get_unverified_header(token)["kid"]},
    )
    return row.token
