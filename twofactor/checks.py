"""A system check for the one setting pair that leaves step-up weaker than it reads."""

from __future__ import annotations

from django.conf import settings
from django.core import checks


@checks.register(checks.Tags.security)
def step_up_without_required_enrolment(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    """Step-up on, enrolment optional and password logins open: a warning.

    A reviewer who never enrolled can enrol an authenticator from a password-only
    session and pass step-up with it a moment later, so for those accounts step-up
    is only as strong as the password. Requiring enrolment (everyone enrols at their
    first login, before any approval) or SSO-only sign-in for reviewers closes it.
    """
    if not settings.IMPRI_STEP_UP_CENTS or settings.IMPRI_REQUIRE_2FA:
        return []
    if settings.IMPRI_OIDC_SSO_ONLY:
        return []
    return [
        checks.Warning(
            "IMPRI_STEP_UP_CENTS is set but IMPRI_REQUIRE_2FA is off: a reviewer who has "
            "not enrolled an authenticator can enrol one from a password-only session and "
            "pass step-up with it at once, so for them step-up is only as strong as the "
            "password.",
            hint="Set IMPRI_REQUIRE_2FA=true (everyone enrols at their first login), or "
            "IMPRI_OIDC_SSO_ONLY=true with MFA at the identity provider.",
            id="impri.W002",
        )
    ]
