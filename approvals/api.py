"""REST adapter (django-ninja): parse, call a service, shape the answer."""

from __future__ import annotations

import copy
import logging
import re
from datetime import UTC, datetime, timedelta
from typing import Annotated, Literal

import psycopg
from django.db import DatabaseError, transaction
from django.db.models import Q
from django.http import HttpRequest
from ninja import Field, Header, NinjaAPI, Path, Query, Router, Schema, Status
from ninja.errors import AuthenticationError, HttpError, ValidationError
from ninja.security import HttpBearer

from audit import access as audit_access
from audit import export as audit_export
from audit import log as audit_log
from audit.models import ChainHead, VerificationRun

from . import dbexec, faults, keys, services, stepup
from .errors import Forbidden, ImpriError, InvalidInput, RateLimited
from .models import Action
from .presenters import action_out, decision_out
from .schemas import (
    JSON_VALUE_MARKER,
    JSON_VALUE_REF,
    JSON_VALUE_SCHEMA,
    NO_NUL,
    ActionIn,
    ActionOut,
    ActionPage,
    CancelIn,
    DecisionIn,
    DecisionOut,
    ErrorOut,
    RejectIn,
    ResultIn,
    Timestamp,
)

logger = logging.getLogger(__name__)


class KeyAuth(HttpBearer):
    """Bearer keys, checked on the database pool: a request holds no thread of its own.

    Checked here, before ninja validates the body, so a caller without a valid
    key learns nothing but 401.
    """

    async def authenticate(self, request: HttpRequest, token: str) -> keys.Principal | None:
        return await dbexec.run(keys.authenticate, token)


class ImpriAPI(NinjaAPI):
    def get_openapi_schema(self, *args, **kwargs):
        """The document, with the JSON value schema the agent JSON fields refer to."""
        schema = super().get_openapi_schema(*args, **kwargs)
        schema.setdefault("components", {}).setdefault("schemas", {})["JsonValue"] = copy.deepcopy(
            JSON_VALUE_SCHEMA
        )
        return _point_at_json_value(schema)


def _point_at_json_value(node):
    if node == JSON_VALUE_MARKER:
        return {"$ref": JSON_VALUE_REF}
    if isinstance(node, dict):
        for key, value in node.items():
            node[key] = _point_at_json_value(value)
    elif isinstance(node, list):
        node[:] = [_point_at_json_value(item) for item in node]
    return node


api = ImpriAPI(
    title="Impri",
    version="1",
    description="Human approval for the actions of AI agents.",
    urls_namespace="api",
    auth=KeyAuth(),
)
router = Router(tags=["actions"])

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
    422: ErrorOut,
    429: ErrorOut,
}


# --- Error mapping (once for the whole API) ------------------------------------


@api.exception_handler(ImpriError)
def _domain_error(request, exc: ImpriError):
    response = api.create_response(request, exc.as_dict(), status=exc.status_code)
    if isinstance(exc, RateLimited):
        response["Retry-After"] = str(exc.retry_after)
    return response


@api.exception_handler(Exception)
def _unexpected_error(request, exc: Exception):
    """Nothing on /api/ answers an HTML page: a database away is 503, the rest a JSON 500."""
    if isinstance(exc, DatabaseError | psycopg.Error):
        faults.note("database", "the API answers 503", exc)
        return api.create_response(
            request,
            {"detail": "the database is unavailable; retry shortly", "code": "unavailable"},
            status=503,
        )
    logger.exception("unexpected error on %s %s", request.method, request.path)
    return api.create_response(
        request, {"detail": "internal error; it was logged", "code": "internal"}, status=500
    )


@api.exception_handler(AuthenticationError)
def _auth_error(request, exc):
    return api.create_response(
        request,
        {
            "detail": "missing, unknown or revoked key: send Authorization: Bearer <key>",
            "code": "not_authenticated",
        },
        status=401,
    )


@api.exception_handler(HttpError)
def _http_error(request, exc: HttpError):
    """ninja's own refusals, in our error shape; the only 400 is a body that isn't JSON."""
    if exc.status_code == 400:
        body = {"detail": "body: is not valid JSON", "code": "bad_request", "field": "body"}
    else:
        body = {"detail": str(exc), "code": "error"}
    return api.create_response(request, body, status=exc.status_code)


@api.exception_handler(ValidationError)
def _validation_error(request, exc: ValidationError):
    problems = [_describe(error) for error in exc.errors]
    first = problems[0] if problems else {"field": "body", "message": "invalid input"}
    return api.create_response(
        request,
        {
            "detail": "; ".join(f"{p['field']}: {p['message']}" for p in problems),
            "code": "invalid",
            "field": first["field"],
            "errors": problems,
        },
        status=422,
    )


def _describe(error: dict) -> dict:
    loc = [str(part) for part in error.get("loc", ())]
    # ninja prefixes ("body", "<param>") or ("query",); callers know the fields, not our params.
    if loc[:1] == ["body"]:
        loc = loc[2:]
    elif loc[:1] in (["query"], ["path"], ["header"]):
        loc = loc[1:]
    message = error.get("msg", "invalid")
    if message.startswith("Value error, "):
        message = message[len("Value error, ") :]
        field, sep, rest = message.partition(": ")
        here = ".".join(loc)
        if sep and " " not in field and (not loc or field == here or field.startswith(here + ".")):
            return {"field": field, "message": rest}
    return {"field": ".".join(loc) or "body", "message": message}


# --- Helpers ------------------------------------------------------------------


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


# --- Agent endpoints ---------------------------------------------------------------


# Without timeout_s a decision request waits this long (an agent's HTTP client
# usually allows 60 s; the answer is "pending" after it: call again).
DEFAULT_AWAIT_S = 30.0

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


@router.post("/actions", response={200: ActionOut, 201: ActionOut, **ERRORS})
@dbexec.view
def push_action(request, data: ActionIn, idempotency_key: str | None = IDEMPOTENCY_HEADER):
    """Propose an action. 201 when created, 200 with the same body when an Idempotency-Key is replayed."""
    action, created = services.push_action(
        _agent(request), data, idempotency_key=_key(idempotency_key)
    )
    return Status(201 if created else 200, action_out(action, _base(request)))


@router.get("/actions/{action_id}", response={200: ActionOut, **ERRORS})
@dbexec.view
def get_action(request, action_id: ActionId):
    return action_out(_read(request, action_id), _base(request))


@router.get("/actions/{action_id}/decision", response={200: DecisionOut, **ERRORS})
async def await_decision(
    request,
    action_id: ActionId,
    timeout_s: float = Query(
        DEFAULT_AWAIT_S,
        ge=0,
        description="Seconds to wait for a decision (0: just look); capped by IMPRI_MAX_AWAIT_S.",
    ),
):
    """Long-poll: answers as soon as the action is decided, else with status pending after timeout_s.

    While it waits it holds no thread and no database connection (see
    ``approvals.waiting``); on shutdown it answers pending at once: call again.
    """
    principal: keys.Principal = request.auth
    if principal.agent is None:
        raise Forbidden("only the agent that pushed an action can await its decision")
    action = await services.await_decision(action_id, agent=principal.agent, timeout_s=timeout_s)
    return await dbexec.run(decision_out, action, lane="wake")


@router.post("/actions/{action_id}/result", response={200: ActionOut, **ERRORS})
@dbexec.view
def report_result(request, action_id: ActionId, data: ResultIn):
    action = services.report_result(
        action_id, agent=_agent(request), status=data.status, detail=data.detail, grant=data.grant
    )
    return action_out(action, _base(request))


@router.post("/actions/{action_id}/cancel", response={200: ActionOut, **ERRORS})
@dbexec.view
def cancel_action(request, action_id: ActionId, data: CancelIn | None = None):
    reason = data.reason if data else ""
    return action_out(
        services.cancel_action(action_id, agent=_agent(request), reason=reason), _base(request)
    )


class ListFilters(Schema):
    status: (
        Literal["pending", "approved", "rejected", "expired", "cancelled", "executed", "failed"]
        | None
    ) = None
    kind: str | None = Field(None, json_schema_extra={"pattern": NO_NUL})
    agent: str | None = Field(None, json_schema_extra={"pattern": NO_NUL})
    cursor: str | None = Field(
        None,
        description="`next_cursor` of the previous page.",
        json_schema_extra={"pattern": CURSOR_RE.pattern},
    )
    limit: int = Field(50, ge=1, le=200)


@router.get("/actions", response={200: ActionPage, **ERRORS})
@dbexec.view
def list_actions(request, filters: Query[ListFilters]):
    """Newest first. Agents see their own actions; reviewers those routed to their groups."""
    principal: keys.Principal = request.auth
    if principal.agent is not None:
        qs = Action.objects.filter(agent=principal.agent)
    else:
        qs = Action.objects.visible_to_reviewer(principal.user)
    if filters.status:
        qs = qs.with_effective_status(filters.status)
    if filters.kind:
        qs = qs.filter(kind=filters.kind)
    if filters.agent:
        qs = qs.filter(agent__name=filters.agent)
    if filters.cursor is not None:
        created_at, last_id = _decode_cursor(filters.cursor)
        qs = qs.filter(Q(created_at__lt=created_at) | Q(created_at=created_at, id__lt=last_id))
    page = list(
        qs.select_related("agent", "decided_by_user").order_by("-created_at", "-id")[
            : filters.limit + 1
        ]
    )
    more = len(page) > filters.limit
    page = page[: filters.limit]
    base = _base(request)
    return {
        "items": [action_out(action, base) for action in page],
        "next_cursor": _encode_cursor(page[-1]) if more else None,
    }


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MICROSECOND = timedelta(microseconds=1)


def _encode_cursor(action: Action) -> str:
    return f"{(action.created_at - EPOCH) // MICROSECOND}_{action.pk}"


def _decode_cursor(cursor: str) -> tuple[datetime, str]:
    """Any cursor of the documented shape is a position (before 2286), so none is refused."""
    match = CURSOR_RE.match(cursor)
    if not match:
        raise InvalidInput("cursor", "is not a cursor returned by this endpoint")
    return EPOCH + int(match.group(1)) * MICROSECOND, match.group(2)


# --- Reviewer endpoints ---------------------------------------------------------------


@router.post("/actions/{action_id}/approve", response={200: ActionOut, **ERRORS})
@dbexec.view
def approve(
    request,
    action_id: ActionId,
    data: DecisionIn | None = None,
    idempotency_key: str | None = IDEMPOTENCY_HEADER,
):
    data = data or DecisionIn()
    reviewer = _reviewer(request)
    with stepup.via_token(request.auth.key):  # a service token can't approve at the step-up limit
        action = services.decide(
            action_id,
            by=reviewer,
            verdict="approve",
            edits=data.edits,
            note=data.note,
            idempotency_key=_key(idempotency_key),
            approves_sha256=data.payload_sha256.lower() if data.payload_sha256 else None,
        )
    return action_out(action, _base(request))


@router.post("/actions/{action_id}/reject", response={200: ActionOut, **ERRORS})
@dbexec.view
def reject(
    request,
    action_id: ActionId,
    data: RejectIn | None = None,
    idempotency_key: str | None = IDEMPOTENCY_HEADER,
):
    data = data or RejectIn()
    action = services.decide(
        action_id,
        by=_reviewer(request),
        verdict="reject",
        note=data.note,
        reason=data.reason or "",
        idempotency_key=_key(idempotency_key),
    )
    return action_out(action, _base(request))


audit_router = Router(tags=["audit"])


class AuditEventOut(Schema):
    seq: int
    scheme: int
    at: datetime
    actor_type: str
    actor_id: str
    actor_ref: str
    action_id: str
    event: str
    data: dict
    prev_hash: str
    hash: str


class AuditPage(Schema):
    items: list[AuditEventOut]
    next_after: int | None


class VerificationOut(Schema):
    ok: bool
    checked: int
    first_broken_seq: int | None
    problem: str


class CheckpointIn(Schema):
    seq: int = Field(ge=1)
    hash: str = Field(min_length=64, max_length=64)
    at: str = Field(max_length=40)
    signature: str = Field(min_length=64, max_length=64)


class VerifyIn(Schema):
    checkpoint: CheckpointIn


class VerificationRunOut(Schema):
    id: int
    kind: str
    status: str
    requested_by: str
    requested_at: datetime
    finished_at: datetime | None
    ok: bool | None
    checked: int
    first_broken_seq: int | None
    problem: str
    from_seq: int
    to_seq: int
    to_hash: str


class CheckpointOut(Schema):
    seq: int
    hash: str
    at: str
    signature: str


class AuditStateOut(Schema):
    checkpoint: CheckpointOut | None
    head_seq: int
    last_verified_seq: int
    runs: list[VerificationRunOut]


def _auditor(request):
    user = _reviewer(request)
    if not audit_access.is_auditor(user):
        raise Forbidden(
            "this needs the audit.audit_log permission or membership of the auditors group"
        )
    return user


@audit_router.get("", response={200: AuditPage, **ERRORS})
@dbexec.view
def list_audit(
    request,
    action_id: str | None = Query(None, pattern=NO_NUL),
    since: Timestamp | None = None,
    until: Timestamp | None = None,
    after: int = Query(0, ge=0, le=2**63 - 1),
    limit: int = Query(100, ge=1, le=1000),
):
    """Audit events in chain order, filtered like `impri audit export`; page with `after`.

    A reviewer reads the events of an action they may review; the whole log
    (no action_id) needs the audit.audit_log permission or the auditors group.
    """
    user = _reviewer(request)
    if not audit_access.is_auditor(user):
        if not action_id:
            raise Forbidden(
                "reading the whole audit log needs the audit.audit_log permission "
                "or the auditors group; pass action_id"
            )
        services.get_action_for_reviewer(action_id, user)
    qs = audit_export.events(since=since, until=until, action_id=action_id, after=after)
    events = list(qs[: limit + 1])
    more = len(events) > limit
    events = events[:limit]
    return {"items": events, "next_after": events[-1].seq if more else None}


def _verification(result) -> dict:
    return {
        "ok": result.ok,
        "checked": result.checked,
        "first_broken_seq": result.first_broken_seq,
        "problem": result.problem,
    }


@audit_router.get("/verify", response={200: VerificationOut, **ERRORS})
@dbexec.view
def verify_audit(request):
    """Verify from the last verified checkpoint to the chain head (only the new events)."""
    user = _reviewer(request)
    return _verification(audit_log.verify_routine(by=user.get_username()))


@audit_router.post("/verify", response={200: VerificationOut, **ERRORS})
@dbexec.view
def verify_audit_checkpoint(request, data: VerifyIn):
    """Verify that the chain still holds a signed checkpoint and runs intact from it to the head."""
    user = _reviewer(request)
    result = audit_log.verify_checkpoint(data.checkpoint.dict(), by=user.get_username())
    return _verification(result)


@audit_router.get("/checkpoint", response={200: AuditStateOut, **ERRORS})
@dbexec.view
def audit_state(request):
    """A signed checkpoint of the head to keep elsewhere, and the recent verification runs."""
    _auditor(request)
    runs = VerificationRun.objects.order_by("-pk")[:20]
    head = ChainHead.objects.filter(pk=1).values_list("seq", flat=True).first()
    return {
        "checkpoint": audit_log.make_checkpoint(),
        "head_seq": head or 0,
        "last_verified_seq": audit_log.last_verified().seq,
        "runs": list(runs),
    }


@audit_router.post("/verify/full", response={202: VerificationRunOut, **ERRORS})
@dbexec.view
def verify_audit_full(request):
    """Queue a re-verification of the whole chain; poll GET /audit/verify/full/{id}."""
    user = _auditor(request)
    with transaction.atomic():
        run = audit_log.request_full_verification(by=user.get_username())
    return Status(202, run)


@audit_router.get("/verify/full/{run_id}", response={200: VerificationRunOut, **ERRORS})
@dbexec.view
def verify_audit_full_result(request, run_id: int):
    _auditor(request)
    run = VerificationRun.objects.filter(pk=run_id).first()
    if run is None:
        raise _NotFound(f"no verification run {run_id}")
    return run


class _NotFound(ImpriError):
    status_code = 404
    code = "not_found"


api.add_router("/", router)
api.add_router("/audit", audit_router)
