"""A system check for the one setting that opens the closed world of money (issue 39)."""

from __future__ import annotations

from django.conf import settings
from django.core import checks


@checks.register(checks.Tags.security)
def undeclared_kinds_detected(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    """``IMPRI_UNDECLARED_KINDS=detect``: a warning at every start, for as long as it is set.

    With it a kind that declares no money is guarded by what the detector guesses
    from its payload, and a payload shaped in a way it does not guess passes as
    moving no money: a migration period, not a way to run.
    """
    if settings.IMPRI_UNDECLARED_KINDS != "detect":
        return []
    return [
        checks.Warning(
            "IMPRI_UNDECLARED_KINDS=detect: kinds that declare no money are guarded by what "
            "the detector guesses from their payloads (step-up, the Slack ceiling, auto_approve "
            "rules, edit bounds, budgets); a payload it does not read passes as moving none.",
            hint="Declare every kind your agents push (`impri rules kinds --undeclared` lists "
            'them; docs/rules.md, "Kinds and money"), then unset IMPRI_UNDECLARED_KINDS.',
            id="impri.W004",
        )
    ]
