"""Every use of a third-party library's private API, one module per upstream.

Only what correctness needs stays here: the SSRF guard's httpx pool (``httpx``), the two
OIDC endpoints learnt at sign-in (``mozilla_django_oidc``), the test-transaction check
(``django.in_code_atomic_block``) and the MCP stdio door that reads each line one way
(``mcp``). Each module's docstring says what it overrides, why (its reason) and how it
goes away (its exit plan: the upstream change that would let Impri use a public API).

``tests/project/test_compat.py`` checks the upstream *behaviour* each one relies on (a test
case's atomic blocks still carry Django's mark, httpx still sends through the pool it is
given, the library still reads the endpoints at request time, the SDK still serves over
the streams it is given), so a patch release that keeps the behaviour passes and one that
breaks it fails, on CI's newest-versions leg the day it ships.

These modules import the standard library and third-party code only, never Impri's apps:
they sit below everything else.
"""
