"""Django internals Impri relies on: the test-transaction check (one, for correctness).

``in_code_atomic_block`` reads ``Atomic._from_testcase``, Django's mark on the blocks
``TestCase`` opens around each test, so that a service that forgot its own transaction
fails under test as in production (``audit.log.record``).

Reason: the tests must be able to fail (not speed).
Relies on: ``TestCase`` still marking its blocks (``tests/project/test_compat.py`` checks a
test case's blocks don't count and code's do).
Exit plan: Django has no public way to tell them apart (its own check for
``atomic(durable=True)`` reads this same mark); when it grows one, read that, and if the
mark goes first, run the service tests on ``transactional_db`` (no enclosing block,
slower) and read ``connection.in_atomic_block`` instead.

Serving (Django's own ``ASGIHandler``, one ``MIDDLEWARE``) and the database (the stock
SQLite backend with its documented ``OPTIONS``, every statement the ORM's) need no
override (issue 41).
"""

from __future__ import annotations


def in_code_atomic_block(connection) -> bool:
    """True inside an atomic block that code opened; a test case's own blocks do not count."""
    return any(not getattr(block, "_from_testcase", False) for block in connection.atomic_blocks)
