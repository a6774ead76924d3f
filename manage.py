#!/usr/bin/env python
"""Django's command-line utility for administrative tasks."""

import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "impri.settings")
    from django.core.management import execute_from_command_line

    from impri import eventloop

    # Before the settings load daphne, which builds the server's loop (impri/eventloop.py).
    try:
        eventloop.choose(sys.argv[1] if len(sys.argv) > 1 else None)
    except eventloop.Unavailable as exc:
        sys.exit(f"manage.py: {exc}")

    execute_from_command_line(sys.argv)
