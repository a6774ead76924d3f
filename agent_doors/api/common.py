"""What the REST routes share: path and header parameters, the error responses, who is calling."""

from __future__ import annotations

import re
from typing import Annotated

from django.http import HttpRequest
from ninja import Header, Path
from ninja.security import HttpBearer

from approvals import services
from approvals.errors import Forbidden, InvalidInput
from approvals.models import Action
from approvals.schemas import ErrorOut
from identity import keys
from plumbing.database import database_sync_to_async

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


# --- Bearer keys -------------------------------------------------------------------------


class KeyAuth(HttpBearer):
    """Bearer keys (``identity.keys.authenticate``: its rate limit, its ``last_used_at``).

    ninja checks the key before it validates the body, so a caller without a valid key
    learns nothing but 401. The routes are sync views: ninja runs the check and the
    view in the request's thread.
    """

    def authenticate(self, request: HttpRequest, token: str) -> keys.Principal | None:
        return keys.authenticate(token)


class AsyncKeyAuth(HttpBearer):
    """``KeyAuth`` for an async route (the decision long-poll): the check on a thread."""

    async def authenticate(self, request: HttpRequest, token: str) -> keys.Principal | None:
        return await _authenticate(token)


_authenticate = database_sync_to_async(keys.authenticate)
