"""System checks about the deployment as a whole (run when a long-running process starts)."""

from __future__ import annotations

import logging

from django.core import checks

from approvals import grants

logger = logging.getLogger(__name__)


@checks.register(checks.Tags.compatibility)
def grant_keys_agree(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    """Replicas that sign grants with different keys: a warning (grants still verify)."""

    try:
        problem = grants.several_keys_problem()
    except Exception as exc:  # not migrated yet, no database: nothing to compare
        logger.debug("impri.W003 skipped: %s", exc)
        return []
    if not problem:
        return []
    return [
        checks.Warning(
            problem,
            hint="Give every impri serve, worker and beat the same IMPRI_GRANT_SIGNING_KEY_FILE "
            "(compose.yaml: the grant_key secret); docs/operations.md, Keys and secrets.",
            id="impri.W003",
        )
    ]
