"""The ``impri`` console script: a thin wrapper over Django's ``manage.py``."""

from __future__ import annotations

import os
import sys


def main(argv: list[str] | None = None) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "impri.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(["impri", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    main()
