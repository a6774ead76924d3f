"""The OpenAPI document in the form client generators understand (issue 33).

openapi-python-client dropped push, approve and report while agent JSON was a
recursive ``anyOf``; .ci/clients_check.py generates real clients from the live
document (openapi-python-client, openapi-typescript) and pushes, approves,
awaits and reports with the generated one. These checks are the offline half:
no schema refers to itself, every operation has its published id, every body
is a named component.
"""

from __future__ import annotations

import pytest
from django.test import Client

# The published operation ids: generated clients name their functions after them.
OPERATION_IDS = {
    ("post", "/api/v1/actions"): "approvals_api_push_action",
    ("get", "/api/v1/actions"): "approvals_api_list_actions",
    ("get", "/api/v1/actions/{action_id}"): "approvals_api_get_action",
    ("get", "/api/v1/actions/{action_id}/decision"): "approvals_api_await_decision",
    ("post", "/api/v1/actions/{action_id}/result"): "approvals_api_report_result",
    ("post", "/api/v1/actions/{action_id}/cancel"): "approvals_api_cancel_action",
    ("post", "/api/v1/actions/{action_id}/approve"): "approvals_api_approve",
    ("post", "/api/v1/actions/{action_id}/reject"): "approvals_api_reject",
    ("post", "/api/v1/actions/{action_id}/request-changes"): "approvals_api_request_changes",
    ("get", "/api/v1/audit"): "approvals_api_list_audit",
    ("get", "/api/v1/audit/verify"): "approvals_api_verify_audit",
    ("post", "/api/v1/audit/verify"): "approvals_api_verify_audit_checkpoint",
    ("get", "/api/v1/audit/checkpoint"): "approvals_api_audit_state",
    ("post", "/api/v1/audit/verify/full"): "approvals_api_verify_audit_full",
    ("get", "/api/v1/audit/verify/full/{run_id}"): "approvals_api_verify_audit_full_result",
    ("post", "/api/v1/ledger/movements"): "approvals_api_record_movement",
    ("get", "/api/v1/ledger/movements"): "approvals_api_list_movements",
}


@pytest.fixture
def doc(db) -> dict:
    return Client().get("/api/v1/openapi.json").json()


def _operations(doc):
    for path, item in doc["paths"].items():
        for method, operation in item.items():
            yield method, path, operation


def _refs(node):
    if isinstance(node, dict):
        if "$ref" in node:
            yield node["$ref"]
        for value in node.values():
            yield from _refs(value)
    elif isinstance(node, list):
        for item in node:
            yield from _refs(item)


def test_every_operation_keeps_its_published_operation_id(doc):
    found = {(method, path): op.get("operationId") for method, path, op in _operations(doc)}
    assert found == OPERATION_IDS
    assert len(set(found.values())) == len(found)


def test_no_schema_refers_to_itself_directly_or_through_others(doc):
    schemas = doc["components"]["schemas"]
    edges = {
        name: {ref.rsplit("/", 1)[-1] for ref in _refs(schema)} for name, schema in schemas.items()
    }

    def reaches(start, goal, seen):
        for nxt in edges.get(start, ()):
            if nxt == goal:
                return True
            if nxt not in seen:
                seen.add(nxt)
                if reaches(nxt, goal, seen):
                    return True
        return False

    assert [name for name in schemas if reaches(name, name, set())] == []


def _named(schema: dict) -> str | None:
    """The component a body is, allowing the ``anyOf [component, null]`` of an optional body."""
    options = schema.get("anyOf", [schema])
    named = [o["$ref"] for o in options if "$ref" in o]
    rest = [o for o in options if "$ref" not in o]
    if len(named) == 1 and all(o == {"type": "null"} for o in rest):
        return named[0].rsplit("/", 1)[-1]
    return None


def test_every_request_and_response_body_is_a_named_component(doc):
    schemas = doc["components"]["schemas"]
    bodies = 0
    for method, path, operation in _operations(doc):
        request = operation.get("requestBody")
        if request:
            schema = request["content"]["application/json"]["schema"]
            assert _named(schema) in schemas, (method, path, schema)
            bodies += 1
        for status, response in operation["responses"].items():
            for content in response.get("content", {}).values():
                assert _named(content["schema"]) in schemas, (method, path, status)
                bodies += 1
    assert bodies > 100


def test_agent_json_fields_are_free_form_objects(doc):
    schemas = doc["components"]["schemas"]
    fields = [
        schemas["ActionIn"]["properties"]["payload"],
        schemas["ActionIn"]["properties"]["context"],
        schemas["DecisionIn"]["properties"]["edits"],
        next(
            o
            for o in schemas["ResultIn"]["properties"]["detail"]["anyOf"]
            if "type" in o and o["type"] == "object"
        ),
        schemas["ActionOut"]["properties"]["payload"],
        schemas["DecisionOut"]["properties"]["payload"],
    ]
    for field in fields:
        assert field["type"] == "object"
        assert field["additionalProperties"] is True


def test_the_document_is_unchanged_in_paths_and_fields(doc):
    """Only the description changed: the same paths and the same fields in and out."""
    schemas = doc["components"]["schemas"]
    assert set(schemas["ActionIn"]["properties"]) >= {
        "kind", "title", "preview", "payload", "target_url", "editable", "flags", "context",
        "idempotency_key", "callback_url", "expires_in_s", "supersedes",
    }  # fmt: skip
    assert set(schemas["DecisionOut"]["properties"]) >= {
        "action_id", "status", "decision_at", "payload", "preview", "edited_by_human",
        "decided_by", "note", "reason", "payload_sha256", "grant",
    }  # fmt: skip
    assert {path for _, path in OPERATION_IDS} == set(doc["paths"])
