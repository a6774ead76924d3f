"""The decision long-poll as a Channels ``AsyncHttpConsumer``.

``GET /api/v1/actions/{id}/decision`` is where agents wait, by the thousand, for
minutes. ``impri.asgi`` routes it here, beside the websocket consumers, rather than
through Django's handler and ninja: a wait then holds this consumer, its task and the
hub's watch, not a request with its middleware frames and a thread.

It answers as the API's route does (``agent_doors.api.agent.await_decision``, which
serves the same path where Django alone does, as in the test client), and
``tests/agents/test_longpoll.py`` holds the two answers equal for every status and
error:

- the key is checked by the same function (``identity.keys.authenticate``: its rate
  limit, its ``last_used_at``), read from the header as ninja's ``HttpBearer`` reads it;
- ``timeout_s`` is validated as ninja validates the route's query parameter (a number,
  at least 0), after the key;
- the wait is the service's (``approvals.services.await_decision``) on this process's
  hub (``waiting.hub``), the answer the presenter's (``decision_out`` validated by
  ``DecisionOut``), an error the API's envelope (``approvals.errors.answer_to``);
- Django's ``SecurityMiddleware`` gives its redirect and headers, as it does on the API.

A client that goes away while it waits is noticed by daphne, which cancels the consumer
after ``application_close_timeout``; the hub's watch then ends with it.
"""

from __future__ import annotations

import io
import json
from typing import Annotated
from urllib.parse import parse_qsl

from channels.generic.http import AsyncHttpConsumer
from django.core.handlers.asgi import ASGIRequest
from django.http import HttpResponse, JsonResponse
from django.middleware.security import SecurityMiddleware
from ninja.responses import NinjaJSONEncoder
from pydantic import Field, TypeAdapter
from pydantic import ValidationError as PydanticValidationError

from approvals import services
from approvals.errors import InvalidInput, answer_to, not_authenticated
from approvals.schemas import DecisionOut
from approvals.services.waiting import DEFAULT_AWAIT_S
from identity import keys
from plumbing.database import database_sync_to_async
from plumbing.middleware import RefuseNulMiddleware

from . import decisions

TIMEOUT_S = TypeAdapter(Annotated[float, Field(ge=0)])

_authenticate = database_sync_to_async(keys.authenticate)


class Invalid(InvalidInput):
    """ninja's 422 for a query parameter: the field, and the one problem in ``errors``."""

    def __init__(self, field: str, problem: str):
        super().__init__(field, problem)
        self.problem = problem

    def as_dict(self) -> dict:
        return {**super().as_dict(), "errors": [{"field": self.field, "message": self.problem}]}


class DecisionConsumer(AsyncHttpConsumer):
    """One agent's wait for the decision on one action."""

    # No channel of its own: the process's hub hears the wake-ups for every wait.
    channel_layer_alias = None

    async def handle(self, body: bytes) -> None:
        response = self._refused()
        if response is None:
            response = await self._answer()
        response = SecurityMiddleware(_unused).process_response(self._request(), response)
        response.setdefault("X-Frame-Options", "DENY")
        response.setdefault("Cache-Control", "no-store")
        await self.send_response(
            response.status_code,
            response.content,
            headers=[(k.encode("latin-1"), v.encode("latin-1")) for k, v in response.items()],
        )

    def _request(self) -> ASGIRequest:
        """Django's request for this scope, for Django's own checks (not held while waiting)."""
        return ASGIRequest(self.scope, io.BytesIO())

    def _refused(self) -> HttpResponse | None:
        """The answer of a request that is refused before its key is looked at, if it is."""
        if self.scope["method"] != "GET":
            # Django's 405, made JSON on the API (``impri.middleware.ApiAnswersMiddleware``).
            refused = JsonResponse({"detail": "Method not allowed", "code": "http_405"}, status=405)
            refused["Allow"] = "GET"
            return refused
        request = self._request()
        redirect = SecurityMiddleware(_unused).process_request(request)
        if redirect is not None:
            return redirect
        # The API's own refusal of a NUL (on the API it runs in Django's middleware).
        return RefuseNulMiddleware(_unused).before(request)

    async def _answer(self) -> HttpResponse:
        try:
            principal = await _authenticate(self._token())
            if principal is None:
                raise not_authenticated()
            timeout_s = self._timeout_s()
            agent = services.waiter(principal.agent)
            principal = None  # the key's row is not held while waiting
            action = await decisions.wait_for_decision(
                self.scope["url_route"]["kwargs"]["action_id"], agent=agent, timeout_s=timeout_s
            )
            body = DecisionOut.model_validate(await decisions.decision_answer(action)).model_dump()
        except Exception as exc:
            status, error, headers = answer_to(exc, f"GET {self.scope['path']}")
            return _json(status, error, **headers)
        return _json(200, body)

    def _token(self) -> str:
        """The bearer token, as ninja's ``HttpBearer`` reads the header; 401 without one."""
        header = None
        for name, value in self.scope["headers"]:
            if name == b"authorization":
                header = value.decode("latin-1")
        if not header:
            raise not_authenticated()
        scheme, *rest = header.split(" ")
        if scheme.lower() != "bearer":
            raise not_authenticated()
        return " ".join(rest)

    def _timeout_s(self) -> float:
        """``timeout_s`` as ninja's query parameter takes it (the last one given)."""
        query = self.scope.get("query_string", b"").decode("latin-1")
        given = [
            value for name, value in parse_qsl(query, keep_blank_values=True) if name == "timeout_s"
        ]
        if not given:
            return DEFAULT_AWAIT_S
        try:
            return TIMEOUT_S.validate_python(given[-1])
        except PydanticValidationError as exc:
            raise Invalid("timeout_s", exc.errors()[0]["msg"]) from None


def _json(status: int, body: dict, **headers: str) -> HttpResponse:
    """A response rendered as the API renders one (ninja's JSON encoder)."""
    response = HttpResponse(
        json.dumps(body, cls=NinjaJSONEncoder),
        status=status,
        content_type="application/json; charset=utf-8",
    )
    for name, value in headers.items():
        response[name.replace("_", "-")] = value
    return response


def _unused(request):  # pragma: no cover - SecurityMiddleware's hooks are called directly
    raise AssertionError("only SecurityMiddleware's process_request and process_response run")
