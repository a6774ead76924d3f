"""Single sign-on: the Impri user behind an identity provider's claims, and their groups.

The OpenID Connect exchange itself (redirects, tokens, signatures) is
``identity/oidc.py`` with mozilla-django-oidc; this module decides who the
verified claims are and which reviewer groups they belong to:

1. The person is the pair (issuer, ``sub``): an :class:`SsoIdentity` links it to
   one user for good. A first sign-in links an existing account with the same
   *verified* e-mail (never a staff or superuser account: an administrator
   links those in admin), else creates a user.
2. With ``IMPRI_OIDC_GROUPS_CLAIM`` set, the provider owns the person's reviewer
   groups: at every sign-in they are set to the existing Impri groups the claim
   names, so removing someone from the group at the provider removes their
   right to decide that group's actions at their next sign-in. Each change is
   an audited ``user.groups_changed`` event with ``"source": "oidc"``.
"""

from __future__ import annotations

import re

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import IntegrityError, transaction
from django.utils import timezone

from audit import identity
from identity.models import SsoIdentity

SOURCE = "oidc"
_USERNAME_JUNK = re.compile(r"[^\w.@+-]")


class SsoRefused(Exception):
    """The provider vouched for the person, but Impri will not sign them in (the reason says why)."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


def sign_in(issuer: str, claims: dict, *, groups_claim: str = ""):
    """The active user for verified ``claims`` (ID token and userinfo), with groups mapped."""
    subject = claims.get("sub")
    if not isinstance(subject, str) or not subject or len(subject) > 255:
        raise SsoRefused("the identity provider sent no usable subject (sub)")
    try:
        return _sign_in(issuer, subject, claims, groups_claim)
    except IntegrityError:
        # Two first sign-ins of one person raced: the other created the link; use it.
        return _sign_in(issuer, subject, claims, groups_claim)


def _sign_in(issuer: str, subject: str, claims: dict, groups_claim: str):
    with transaction.atomic(), identity.changes_from(SOURCE):
        link = (
            SsoIdentity.objects.select_for_update()
            .select_related("user")
            .filter(issuer=issuer, subject=subject)
            .first()
        )
        if link is None:
            link = _link(issuer, subject, claims)
        user = link.user
        if not user.is_active:
            raise SsoRefused("this Impri account is deactivated")
        email = verified_email(claims)
        if email and email != user.email:
            user.email = email
            user.save(update_fields=["email"])
        if groups_claim:
            set_groups(user, claim_groups(claims, groups_claim))
        link.last_login_at = timezone.now()
        link.save(update_fields=["last_login_at"])
    return user


def verified_email(claims: dict) -> str:
    email = claims.get("email")
    verified = claims.get("email_verified") in (True, "true")
    return email.strip() if verified and isinstance(email, str) and "@" in email else ""


def claim_groups(claims: dict, name: str) -> set[str]:
    """Group names from the claim: a list (or one string); absent means no group at all."""
    value = claims.get(name)
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        return set()
    # Keycloak sends full paths ("/finance"): the leading slash is not part of the name.
    return {v.lstrip("/") for v in value if isinstance(v, str) and v.strip("/")}


def set_groups(user, names: set[str]) -> None:
    """Make the user's groups exactly the existing groups named (none is created)."""
    wanted = set(Group.objects.filter(name__in=names))
    current = set(user.groups.all())
    if current - wanted:
        user.groups.remove(*(current - wanted))
    if wanted - current:
        user.groups.add(*(wanted - current))


def _link(issuer: str, subject: str, claims: dict) -> SsoIdentity:
    User = get_user_model()
    email = verified_email(claims)
    how = "created"
    user = None
    if email:
        unlinked = User.objects.filter(email__iexact=email).exclude(sso_identities__issuer=issuer)
        matches = list(unlinked[:2])
        if len(matches) > 1:
            raise SsoRefused(
                "several Impri accounts use this e-mail: an administrator links yours "
                "(admin → SSO identities)"
            )
        if matches:
            user = matches[0]
            if user.is_staff or user.is_superuser:
                raise SsoRefused(
                    "the Impri account with this e-mail is an administrator's: an administrator "
                    "links it to single sign-on in admin (SSO identities)"
                )
            how = "email"
    if user is None:
        # No password: this person signs in through the provider only.
        user = User.objects.create_user(_free_username(claims, subject), email=email)
    link = SsoIdentity(user=user, issuer=issuer, subject=subject)
    link._audit_how = how  # the user.sso_linked event (audit/identity.py) records it
    link.save()
    return link


def _free_username(claims: dict, subject: str) -> str:
    """preferred_username, else the e-mail, else the subject; "-2", "-3"... when taken."""
    User = get_user_model()
    wanted = claims.get("preferred_username") or claims.get("email") or f"sso-{subject}"
    base = _USERNAME_JUNK.sub("", str(wanted))[:140] or "sso-user"
    name, n = base, 1
    while User.objects.filter(username__iexact=name).exists():
        n += 1
        name = f"{base}-{n}"
    return name
