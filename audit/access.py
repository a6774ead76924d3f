"""Who may read the whole log, checkpoint details, and start full verifications."""

from __future__ import annotations

AUDITORS_GROUP = "auditors"


def is_auditor(user) -> bool:
    """A superuser, a holder of ``audit.audit_log``, or a member of the ``auditors`` group."""
    if user is None or not user.is_active:
        return False
    if user.is_superuser or user.has_perm("audit.audit_log"):
        return True
    return user.groups.filter(name=AUDITORS_GROUP).exists()
