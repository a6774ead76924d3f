"""django-ninja internals Impri's REST API replaces: one thread hop for a sync route's whole work.

``OneHopOperation`` is ninja's ``AsyncOperation.run`` reordered. For a route whose view is
sync and runs on Impri's database pool (``@db_threads.view``), ninja would check the bearer
key (``KeyAuth``, a hop of its own to the pool), parse and validate the body on the loop,
then hop again for the view. Here the authenticator only reads the header, and one hop
checks the key (``check_key``), then builds the view's arguments (``Operation._get_values``:
the body parsed and validated, in the same order, so a request without a valid key gets 401
whatever its body), runs the sync view and makes its response
(``Operation._result_to_response``). Errors still go through the API's exception handlers
on the loop. Measured to buy a hop per request (docs/benchmarks.md, "The approve request"):
``tests/core/test_approve_path.py`` holds its answers equal to ninja's own.

Subclasses set ``hop`` (a coroutine function ``hop(fn, *args)`` that runs ``fn`` on the
pool) and write ``check_key(request)``.

Re-read django-ninja's ``ninja/operation.py`` (``AsyncOperation.run``,
``Operation._get_values``, ``Operation._result_to_response``, ``Operation._run_checks``)
before moving ``WRITTEN_FOR`` (``tests/project/test_compat.py``).
"""

from __future__ import annotations

from ninja.operation import AsyncOperation

WRITTEN_FOR = {"django-ninja": "1.7"}
UPSTREAM = {
    "ninja.operation:AsyncOperation.run": "7cb074bc1736a62e",
    "ninja.operation:Operation._get_values": "696d40118ceed1e0",
    "ninja.operation:Operation._result_to_response": "6ca7ef1c987a1af9",
    "ninja.operation:Operation._run_checks": "905a55ce799a843a",
}


class OneHopOperation(AsyncOperation):
    """ninja's ``AsyncOperation.run`` with the key check, the body and the sync view in one hop."""

    @staticmethod
    async def hop(fn, *args):  # pragma: no cover - set by the subclass
        raise NotImplementedError

    def check_key(self, request) -> None:  # pragma: no cover - written by the subclass
        raise NotImplementedError

    async def run(self, request, **kw):  # type: ignore[override]
        error = await self._run_checks(request)
        if error:
            return error
        try:
            return await self.hop(self._in_hop, request, kw)
        except Exception as e:
            return self.api.on_exception(request, e)

    def _in_hop(self, request, kw: dict):
        self.check_key(request)
        temporal_response = self.api.create_temporal_response(request)
        values = self._get_values(request, kw, temporal_response)
        result = self.view_func.__wrapped__(request, **values)  # the sync view, in this hop
        return self._result_to_response(request, result, temporal_response)

    @classmethod
    def install(cls, view_func):
        """Make the ninja operation of ``view_func`` (a ``@db_threads.view`` route) one of these."""
        operation = view_func._ninja_operation
        assert isinstance(operation, AsyncOperation) and hasattr(view_func, "__wrapped__")
        operation.__class__ = cls
        return view_func
