"""SQLite with an in-process writer queue: Django's backend, plus a lock per file.

The embedded mode's ``ENGINE`` (``impri.sqlite3``). Django loads a backend's
``base.DatabaseWrapper``; this one is ``compat.django.QueuedWritersSQLiteWrapper``,
where the override of Django's private transaction methods lives with its reasons
and the Django version it was written against.
"""

from __future__ import annotations

from compat.django import QueuedWritersSQLiteWrapper as DatabaseWrapper

__all__ = ["DatabaseWrapper"]
