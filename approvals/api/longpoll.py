"""The decision long-poll, served below Django's request machinery while it waits.

``GET /api/v1/actions/{id}/decision`` is where agents wait, by the thousand, for
minutes. Through Django and ninja a wait holds, for all that time, an ``ASGIRequest``
with its ``META`` and headers, the resolver's match, a coroutine frame per middleware
and per ninja layer, the handler's disconnect listener and the ``asyncio.wait`` over
both: about 40 KB a wait in all (docs/benchmarks.md, "Memory per waiting agent").

:class:`DecisionLongPoll` serves the same request with what the wait needs: the
agent, the action id, the timeout, the hub's watch and one task that notices the
client going away. Everything else is Django's and ninja's own code, run when it is
needed and not held:

- before the wait, the API middleware's ``before`` hooks run on a request object that
  is then dropped, and the key is checked by the same function as ninja's ``KeyAuth``
  (``identity.keys.authenticate``: its rate limit, its ``last_used_at``);
- the answer is the operation's: ``decision_out`` validated by ``DecisionOut``, made a
  response by the API's ``create_response`` (an error: by the API's ``on_exception``, as
  ninja's operation does), passed through the middleware's ``after`` hooks, logged as
  Django's handler logs a 4xx or 5xx, and sent by Django's handler.

What it doesn't recognise goes to Django unchanged (``fallback``), before any wait: a
request with a body or an unusual or blank ``timeout_s``, a missing or malformed key, a
middleware's early answer or refusal, a key that isn't an agent's (handed on as checked,
so its rate limit counts it once). The envelopes and status codes are therefore ninja's
own, and ``tests/agents/test_longpoll.py`` holds the two paths' answers equal.
"""

from __future__ import annotations

import asyncio
import io
import logging
import re
from collections.abc import Awaitable, Callable, Sequence
from urllib.parse import parse_qsl

from django.core.handlers.asgi import ASGIRequest
from django.utils.log import log_response

from identity import keys
from plumbing import db_threads

from .. import services
from ..presenters import decision_out
from ..schemas import DecisionOut
from ..services.waiting import answer_lane
from .agent import DEFAULT_AWAIT_S

logger = logging.getLogger(__name__)

ASGIApp = Callable[[dict, Callable, Callable], Awaitable[None]]

# The scope key under which a reviewer's key, checked here, goes on to Django's handler:
# ``KeyAuth`` takes it instead of checking (and counting) the key a second time.
CHECKED_KEY = "impri.checked_key"
PATH = re.compile(r"/api/v1/actions/([^/\x00]+)/decision")
# The spellings of timeout_s served here; any other ("1e3", " 5", "inf") goes to ninja.
PLAIN_SECONDS = re.compile(r"\d{1,9}(\.\d{1,9})?")


class DecisionLongPoll:
    """The ASGI app of the decision long-poll; ``fallback`` is Django's API handler.

    ``middleware``: the API's middleware instances (``IMPRI_API_MIDDLEWARE``), each with
    ``before(request)`` and ``after(request, response)``; ``create_response`` and
    ``on_exception``: the API's (an answer, and the answer to an error, as ninja makes
    them); ``send_response``: the Django handler's, which writes a response as ASGI
    messages.
    """

    def __init__(
        self,
        fallback: ASGIApp,
        *,
        middleware: Sequence,
        create_response: Callable,
        on_exception: Callable,
        send_response: Callable,
    ):
        self.fallback = fallback
        self.middleware = tuple(middleware)
        self.create_response = create_response
        self.on_exception = on_exception
        self.send_response = send_response

    @staticmethod
    def matches(scope: dict) -> bool:
        return scope["method"] == "GET" and PATH.fullmatch(scope["path"]) is not None

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        try:
            plain = self._plain_request(scope)
        except Exception:  # a middleware refused by raising (too many fields, a bad Host)
            plain = None
        if plain is None:
            return await self.fallback(scope, receive, send)
        action_id, token, timeout_s = plain
        try:
            principal = await db_threads.run(keys.authenticate, token)
        except Exception:  # refused (rate limit) or failed: Django's answer, from the start
            principal = None
        if principal is None:
            return await self.fallback(scope, receive, send)
        if principal.agent is None:
            # A reviewer's key: Django's 403, with the key already checked (and counted).
            return await self.fallback({**scope, CHECKED_KEY: (token, principal)}, receive, send)
        agent, principal = principal.agent, None  # the key's row is not held while waiting
        waiting = asyncio.current_task()
        gone = asyncio.get_running_loop().create_task(_until_gone(receive))

        def cancel_if_gone(task: asyncio.Task) -> None:
            if not task.cancelled() and task.exception() is None:
                waiting.cancel()

        gone.add_done_callback(cancel_if_gone)
        body, error = None, None
        try:
            action = await services.await_decision(action_id, agent=agent, timeout_s=timeout_s)
            body = await db_threads.run(decision_out, action, lane=answer_lane(action))
        except asyncio.CancelledError:
            if gone.done() and not gone.cancelled():
                return  # the client went away: nobody to answer
            raise
        except Exception as exc:  # a foreign or unknown action, a failure: the API's answer
            error = exc
        finally:
            gone.remove_done_callback(cancel_if_gone)
            gone.cancel()
        await self._answer(scope, send, body, error)

    def _plain_request(self, scope: dict) -> tuple[str, str, float] | None:
        """``(action id, key, timeout_s)`` of a request served here, or None for Django."""
        token = None
        for name, value in scope["headers"]:
            if name in (b"content-length", b"transfer-encoding") and value not in (b"", b"0"):
                return None
            if name == b"authorization":
                if token is not None:
                    return None
                scheme, _, token = value.decode("latin-1").partition(" ")
                if scheme.lower() != "bearer" or not token or " " in token:
                    return None
        if token is None:
            return None
        query = scope.get("query_string", b"").decode("latin-1")
        if "\x00" in query or "%00" in query:
            return None
        pairs = parse_qsl(query, keep_blank_values=True)  # a blank timeout_s is ninja's 422
        timeouts = [value for name, value in pairs if name == "timeout_s"]
        if len(timeouts) > 1 or (timeouts and not PLAIN_SECONDS.fullmatch(timeouts[0])):
            return None
        # The middleware's checks (a NUL, the body limit, an HTTPS redirect) on a request
        # that is not kept: an early answer is theirs to give, through Django.
        request = ASGIRequest(scope, io.BytesIO())
        if any(mw.before(request) is not None for mw in self.middleware):
            return None
        action_id = PATH.fullmatch(scope["path"]).group(1)
        return action_id, token, float(timeouts[0]) if timeouts else DEFAULT_AWAIT_S

    async def _answer(self, scope: dict, send: Callable, body, error) -> None:
        """The operation's answer, or the API's answer to ``error``, as ninja and Django give it."""
        request = ASGIRequest(scope, io.BytesIO())
        try:
            if error is not None:
                raise error
            data = DecisionOut.model_validate(body).model_dump()
            response = self.create_response(request, data, status=200)
        except Exception as exc:
            response = self.on_exception(request, exc)
        for mw in reversed(self.middleware):
            response = mw.after(request, response)
        if response.status_code >= 400:  # as Django's handler logs it
            log_response(
                "%s: %s", response.reason_phrase, request.path, response=response, request=request
            )
        try:
            await self.send_response(response, send)
        finally:
            response.close()


async def _until_gone(receive: Callable) -> None:
    """Read the request's messages until the client disconnects."""
    while (await receive())["type"] != "http.disconnect":
        pass
