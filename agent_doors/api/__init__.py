"""REST adapter (django-ninja): parse, call a service, shape the answer.

The API and its error mapping (once for the whole API) live here; the routes in
``agent`` (push, read, await, report, cancel, list), ``reviewer`` (approve,
reject) and ``audit`` (the log and its verification).
"""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError, ValidationError
from ninja.parser import Parser

from approvals.errors import ImpriError, answer_to, not_authenticated
from plumbing import strict_json

from . import agent, audit, reviewer
from .common import KeyAuth


class ImpriAPI(NinjaAPI):
    def get_openapi_operation_id(self, operation) -> str:
        """``approvals_api_<view>``, whichever module holds the route: the ids stay as published.

        Generated clients name their methods after these (``tests/agents/test_openapi.py`` keeps
        them unique and unchanged).
        """
        return f"approvals_api_{operation.view_func.__name__}"

    def get_openapi_schema(self, *, path_prefix=None, path_params=None):
        """The document every linter accepts (``redocly lint``, openapi-spec-validator; .ci/run).

        ``servers`` is IMPRI_BASE_URL (the paths carry ``/api/v1``), or ``/`` (this origin)
        when it is unset; components no operation uses (ninja lists a ``Query`` schema whose
        fields become parameters) are left out.
        """
        schema = super().get_openapi_schema(path_prefix=path_prefix, path_params=path_params)
        schema["servers"] = [{"url": settings.IMPRI_BASE_URL or "/"}]
        schemas = schema.get("components", {}).get("schemas", {})
        used = _referenced({k: v for k, v in schema.items() if k != "components"}, schemas)
        for name in set(schemas) - used:
            del schemas[name]
        return schema


def _referenced(node, schemas: dict, found: set | None = None) -> set:
    """The names of the component schemas ``node`` refers to, directly or through others."""
    found = set() if found is None else found
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/components/schemas/"):
            name = ref.rsplit("/", 1)[-1]
            if name not in found and name in schemas:
                found.add(name)
                _referenced(schemas[name], schemas, found)
        for value in node.values():
            _referenced(value, schemas, found)
    elif isinstance(node, list):
        for item in node:
            _referenced(item, schemas, found)
    return found


# A field nested past 64 levels is the schema's 422, naming the field (``json_problem``);
# a body nested past this is refused before it is parsed, naming the body.
BODY_DEPTH = 4 * strict_json.MAX_DEPTH


class OneReadingParser(Parser):
    """Bodies read one way (``plumbing.strict_json``): a duplicate key or nesting past
    ``BODY_DEPTH`` is a 422."""

    def parse_body(self, request: HttpRequest):
        return strict_json.loads(request.body, max_depth=BODY_DEPTH)


api = ImpriAPI(
    title="Impri",
    version="1",
    description="Human approval for the actions of AI agents.",
    openapi_extra={"info": {"license": {"name": "Apache-2.0", "identifier": "Apache-2.0"}}},
    urls_namespace="api",
    auth=KeyAuth(),
    parser=OneReadingParser(),
)


# --- Error mapping (once for the whole API) ------------------------------------


def _answer(request: HttpRequest, exc: BaseException):
    """The API's envelope for ``exc`` (``approvals.errors.answer_to``, shared with the long-poll)."""
    status, body, headers = answer_to(exc, f"{request.method} {request.path}")
    response = api.create_response(request, body, status=status)
    for name, value in headers.items():
        response[name] = value
    return response


@api.exception_handler(ImpriError)
def _domain_error(request, exc: ImpriError):
    return _answer(request, exc)


@api.exception_handler(Exception)
def _unexpected_error(request, exc: Exception):
    """Nothing on /api/ answers an HTML page: a database away is 503, the rest a JSON 500."""
    return _answer(request, exc)


@api.exception_handler(AuthenticationError)
def _auth_error(request, exc):
    return _answer(request, not_authenticated())


@api.exception_handler(HttpError)
def _http_error(request, exc: HttpError):
    """ninja's own refusals, in our error shape; the only 400 is a body that isn't JSON."""
    if isinstance(exc.__cause__, strict_json.Refused):  # ninja wraps what the parser raises
        detail = f"body: {exc.__cause__}"
        body = {"detail": detail, "code": "invalid", "field": "body"}
        return api.create_response(request, body, status=422)
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


api.add_router("/", agent.router)
api.add_router("/", reviewer.router)
api.add_router("/audit", audit.router)
