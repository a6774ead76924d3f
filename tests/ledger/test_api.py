"""The generic API: a service token records any processor's movements; reviewers read them."""

from __future__ import annotations

import pytest

from identity import keys
from ledger.models import Movement
from tests.conftest import Persona

from .helpers import approved_refund, executed

pytestmark = pytest.mark.django_db


@pytest.fixture
def service(lead):
    _, raw = keys.create_reviewer_token(lead.user, label="adyen-bridge", is_service=True)
    return Persona(key=raw, user=lead.user)


def body(**overrides) -> dict:
    return {
        "id": "adyen-881",
        "kind": "refund",
        "amount_minor": 8400,
        "currency": "USD",
        "occurred_at": 1796550000,
        **overrides,
    }


def test_idempotent_on_id(service):
    client = service.client()
    first = client.post("/ledger/movements", body())
    assert first.status_code == 201, first.content
    again = client.post("/ledger/movements", body())
    assert again.status_code == 200
    assert again.json() == first.json()
    assert Movement.objects.count() == 1


def test_a_changed_body_under_the_same_id_is_409(service):
    client = service.client()
    assert client.post("/ledger/movements", body()).status_code == 201
    response = client.post("/ledger/movements", body(amount_minor=9900))
    assert response.status_code == 409
    assert Movement.objects.get().amount_minor == 8400


@pytest.mark.parametrize(
    "change, field",
    [
        ({"amount_minor": -5}, "amount_minor"),
        ({"amount_minor": 0}, "amount_minor"),
        ({"amount_minor": "84.00"}, "amount_minor"),
        ({"amount_minor": 12.5}, "amount_minor"),
        ({"currency": "XYZ"}, "currency"),
        ({"currency": "dollars"}, "currency"),
        ({"kind": "payout"}, "kind"),
        ({"occurred_at": "yesterday"}, "occurred_at"),
    ],
)
def test_bad_amounts_or_currencies_are_422_naming_the_field(service, change, field):
    response = service.client().post("/ledger/movements", body(**change))
    assert response.status_code == 422, response.content
    assert response.json()["field"] == field
    assert not Movement.objects.exists()


def test_a_non_service_token_is_403(lead, agent):
    assert lead.client().post("/ledger/movements", body()).status_code == 403
    assert agent.client().post("/ledger/movements", body()).status_code == 403
    assert not Movement.objects.exists()


def test_matched_by_action_id_and_listed_by_state(service, agent, lead):
    action = approved_refund(agent.agent, lead.user)
    executed(action, agent.agent)
    client = service.client()
    made = client.post("/ledger/movements", body(action_id=action.pk)).json()
    assert made["state"] == "matched" and made["action_id"] == action.pk
    client.post("/ledger/movements", body(id="adyen-stray", amount_minor=100))
    stray = lead.client().get("/ledger/movements", state="unapproved").json()["items"]
    assert [m["id"] for m in stray] == ["adyen-stray"]
    assert lead.client().get("/ledger/movements", state="nonsense").json()["field"] == "state"
    assert agent.client().get("/ledger/movements").status_code == 403


def test_an_unknown_state_is_422_naming_it_and_the_document_lists_every_state(lead, client):
    from ledger.models import State

    for bad in ("nonsense", "matched\x00", "ÏG\x00¥l#"):
        response = lead.client().get("/ledger/movements", state=bad)
        assert response.status_code == 422, response.content
        assert response.json()["field"] == "state"
    document = client.get("/api/v1/openapi.json").json()
    parameter = next(
        p
        for p in document["paths"]["/api/v1/ledger/movements"]["get"]["parameters"]
        if p["name"] == "state"
    )
    assert set(parameter["schema"]["enum"]) == {"", *State.values}


def test_a_body_that_is_not_json_is_a_documented_400(service, client):
    response = client.post(
        "/api/v1/ledger/movements",
        data=b"\x00",
        content_type="application/json",
        headers={"Authorization": f"Bearer {service.key}"},
    )
    assert response.status_code == 400, response.content
    assert response.json()["field"] == "body"
    document = client.get("/api/v1/openapi.json").json()
    assert "400" in document["paths"]["/api/v1/ledger/movements"]["post"]["responses"]
    assert not Movement.objects.exists()
