"""The OpenAPI document says what the API does (Schemathesis checks it live in .ci/run)."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from tests.factories import make_action


@pytest.fixture
def doc(db) -> dict:
    return Client().get("/api/v1/openapi.json").json()


def _body(doc, path, method="post") -> dict:
    schema = doc["paths"][path][method]["requestBody"]["content"]["application/json"]["schema"]
    ref = next(v for v in schema.get("anyOf", [schema]) if "$ref" in v)
    name = ref["$ref"].rsplit("/", 1)[-1]
    return doc["components"]["schemas"][name]


def test_a_body_that_is_not_json_is_a_documented_400(doc):
    for path in ("/api/v1/actions", "/api/v1/actions/{action_id}/approve"):
        assert "400" in doc["paths"][path]["post"]["responses"]


def test_urls_are_uris_and_timestamps_date_times(doc):
    push = _body(doc, "/api/v1/actions")["properties"]
    for name in ("target_url", "callback_url"):
        assert push[name]["format"] == "uri"
        assert push[name]["pattern"].startswith("^[hH][tT][tT][pP]")
    audit = {p["name"]: p for p in doc["paths"]["/api/v1/audit"]["get"]["parameters"]}
    for name in ("since", "until"):
        assert "date-time" in str(audit[name]["schema"])


def test_edit_keys_and_cursors_are_constrained(doc):
    edits = _body(doc, "/api/v1/actions/{action_id}/approve")["properties"]["edits"]
    assert edits["propertyNames"]["pattern"].startswith("^payload")
    params = {p["name"]: p for p in doc["paths"]["/api/v1/actions"]["get"]["parameters"]}
    assert params["cursor"]["schema"]["pattern"]


def test_agent_json_is_free_form_and_its_bounds_are_described(doc):
    """Free-form (what client generators accept, tests/agents/test_openapi_generators.py); the
    bounds a recursive schema used to carry are in the description and enforced by 422."""
    assert "JsonValue" not in doc["components"]["schemas"]
    payload = _body(doc, "/api/v1/actions")["properties"]["payload"]
    assert payload["type"] == "object"
    assert payload["additionalProperties"] is True
    assert "2^53" in payload["description"]
    context = _body(doc, "/api/v1/actions")["properties"]["context"]
    assert "10^21" in context["description"]


def test_every_cursor_of_the_documented_shape_is_accepted(agent, doc):
    for _ in range(3):
        make_action(agent.agent)
    params = {p["name"]: p for p in doc["paths"]["/api/v1/actions"]["get"]["parameters"]}
    pattern = re.compile(params["cursor"]["schema"]["pattern"])
    first = agent.client().get("/actions", limit=1).json()
    assert pattern.match(first["next_cursor"])
    for cursor in (first["next_cursor"], "0_a", "9999999999999999_zzz"):
        assert agent.client().get("/actions", cursor=cursor).status_code == 200, cursor
    for cursor in ("", "abc", "1_a b"):
        assert agent.client().get("/actions", cursor=cursor).status_code == 422, cursor


def test_servers_license_and_only_used_components(db, settings):
    """What `redocly lint` (recommended) asks of the document (.ci/clients_check.py runs it):
    a real server (no `servers: []`), a license, no component nothing refers to."""
    settings.IMPRI_BASE_URL = ""
    doc = Client().get("/api/v1/openapi.json").json()
    assert doc["servers"] == [{"url": "/"}]  # this origin; the paths carry /api/v1
    assert doc["info"]["license"]["identifier"] == "Apache-2.0"
    text = str({k: v for k, v in doc.items() if k != "components"})
    schemas = doc["components"]["schemas"]
    refs = set(re.findall(r"#/components/schemas/(\w+)", text + str(schemas)))
    assert set(schemas) == refs, set(schemas) ^ refs
    assert "ListFilters" not in schemas  # its fields are the list's query parameters
    assert {p["name"] for p in doc["paths"]["/api/v1/actions"]["get"]["parameters"]} >= {
        "status", "kind", "cursor", "limit"
    }  # fmt: skip
    settings.IMPRI_BASE_URL = "https://impri.example.com"
    doc = Client().get("/api/v1/openapi.json").json()
    assert doc["servers"] == [{"url": "https://impri.example.com"}]
