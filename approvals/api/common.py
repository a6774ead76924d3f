"""What the REST routes share: path and header parameters, the error responses, who is calling."""

from __future__ import annotations

import re
from typing import Annotated

from django.http import HttpRequest
from ninja import Header, Path
from ninja.errors import AuthenticationError

from compat.ninja import OneHopOperation
from identity import keys
from plumbing import db_threads

from .. import services
from ..errors import Forbidden, InvalidInput
from ..models import Action
from ..schemas import ErrorOut

# Path segments: any text without NUL (an unknown id is a 404).
ActionId = Annotated[str, Path(pattern="^[^\\x00/]+$")]
# Cursors are opaque but checkable: "<microseconds since 1970>_<action id>".
CURSOR_RE = re.compile(r"^([0-9]{1,16})_([A-Za-z0-9_]{1,64})$")

ERRORS = {
    400: ErrorOut,
    401: ErrorOut,
    403: ErrorOut,
    404: ErrorOut,
    409: ErrorOut,
    # Any request whose body is over IMPRI_MAX_BODY_BYTES (impri.asgi.BodyLimit), before routing.
    413: ErrorOut,
    422: ErrorOut,
    429: ErrorOut,
}

IDEMPOTENCY_HEADER = Header(
    None,
    alias="Idempotency-Key",
    description="1 to 200 characters of your own. A retry with the same key and the same "
    "request answers with the first outcome instead of doing it twice.",
)


def _key(header_key: str | None) -> str | None:
    if header_key is not None and not 1 <= len(header_key) <= 200:
        raise InvalidInput("Idempotency-Key", "must be 1 to 200 characters")
    if header_key is not None and "\x00" in header_key:
        raise InvalidInput("Idempotency-Key", "must not contain NUL characters")
    return header_key


def _agent(request):
    principal: keys.Principal = request.auth
    if principal.agent is None:
        raise Forbidden("this endpoint needs an agent key; a reviewer token cannot act as an agent")
    return principal.agent


def _reviewer(request):
    principal: keys.Principal = request.auth
    if principal.user is None:
        raise Forbidden(
            "agent keys can never decide or read the audit log; a reviewer token is needed"
        )
    return principal.user


def _base(request: HttpRequest) -> str:
    return request.build_absolute_uri("/")


def _read(request, action_id: str) -> Action:
    principal: keys.Principal = request.auth
    if principal.agent is not None:
        return services.get_action_for_agent(action_id, principal.agent)
    return services.get_action_for_reviewer(action_id, principal.user)


# --- The key checked in the view's own hop ----------------------------------------------


class KeyToCheck(str):
    """What ``KeyAuth`` answers for a route of ``key_in_hop``: the bearer token, not yet checked."""


class KeyInHopOperation(OneHopOperation):
    """The key, the body and the sync view in one hop of ``plumbing.db_threads``.

    ``KeyAuth`` only reads the header for these routes (a ``KeyToCheck``); the key is
    checked first in the hop, so a request without a valid key still gets 401 whatever
    its body (``compat.ninja.OneHopOperation``; ``tests/core/test_approve_path.py``).
    """

    @staticmethod
    async def hop(fn, *args):
        return await db_threads.run(fn, *args)

    async def run(self, request: HttpRequest, **kw):  # type: ignore[override]
        request._impri_key_in_hop = True
        return await super().run(request, **kw)

    def check_key(self, request: HttpRequest) -> None:
        token = request.auth
        if isinstance(token, KeyToCheck):
            principal = keys.authenticate(str(token))
            if principal is None:
                raise AuthenticationError()
            request.auth = principal


def key_in_hop(view_func):
    """Above ``@router.<method>`` and ``@db_threads.view``: the key is checked in the view's hop."""
    return KeyInHopOperation.install(view_func)
