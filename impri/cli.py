"""The ``impri`` console script: a thin wrapper over Django's ``manage.py``."""

from __future__ import annotations

import os
import sys

# Long-running commands whose database pool is sized by role (impri/settings.py).
ROLES = ("serve", "worker", "beat", "mcp")


def main(argv: list[str] | None = None) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "impri.settings")
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] in ROLES:
        os.environ.setdefault("IMPRI_PROCESS_ROLE", args[0])
    from django.core.management import execute_from_command_line

    execute_from_command_line(["impri", *args])


if __name__ == "__main__":
    main()
