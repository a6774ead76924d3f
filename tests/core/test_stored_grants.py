"""A decision's grant is stored when the decision is made; every read returns its bytes (issue 40).

docs/api.md promises one grant per approval. It used to be signed anew on each read, so
after ``impri grantkey rotate`` an old decision came back with a grant signed by the new
key. Now ``approvals.grant_store`` signs it in the decision's transaction and reads return
the stored bytes over REST and MCP, after a rotation and after the old key is retired. A
decision made before grants were stored is signed on its first read and stored once.
"""

from __future__ import annotations

import io
import threading

import jwt
import pytest
from asgiref.sync import sync_to_async
from django.core.management import call_command
from django.db import connection
from mcp import Client

from agent_doors.mcp import build_server
from approvals import grant_store, grants, services
from approvals.models import Action, IssuedGrant
from tests.factories import install_rules, make_action, refund

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def own_keys(settings, tmp_path):
    """A data directory of this test's own: a generated key that ``rotate`` may replace."""
    settings.DATA_DIR = tmp_path
    grants.forget_keys()
    yield
    grants.forget_keys()


def kid_of(grant: str) -> str:
    return jwt.get_unverified_header(grant)["kid"]


def rest_grant(agent, action_id: str) -> str:
    response = agent.client().get(f"/actions/{action_id}/decision", timeout_s=0)
    assert response.status_code == 200, response.content
    return response.json()["grant"]


async def _mcp_grant(key: str, action_id: str) -> str:
    async with Client(build_server(api_key=key)) as client:
        result = await client.call_tool("impri_await_decision", {"action_id": action_id})
    assert not result.is_error, result.content
    return result.structured_content["grant"]


def mcp_grant(agent, action_id: str) -> str:
    import asyncio

    return asyncio.run(_mcp_grant(agent.key, action_id))


def test_the_grant_is_stored_with_the_decision_before_anyone_reads_it(own_keys, agent, rita):
    action = make_action(agent.agent)
    assert not IssuedGrant.objects.exists()
    services.decide(action.pk, by=rita.user, verdict="approve")
    stored = IssuedGrant.objects.get(action_id=action.pk)
    assert stored.kid == grants.signing_key().kid == kid_of(stored.token)
    assert rest_grant(agent, action.pk) == stored.token
    claims = grants.check(stored.token, Action.objects.get(pk=action.pk))
    assert claims["act"] == action.pk


def test_a_rule_approval_stores_its_grant_at_the_push(own_keys, agent):
    install_rules()
    action = make_action(agent.agent, **{"payload": refund(1000)["payload"]})
    assert action.status == "approved"
    assert rest_grant(agent, action.pk) == IssuedGrant.objects.get(action_id=action.pk).token


def test_a_rejection_stores_no_grant(own_keys, agent, rita):
    action = make_action(agent.agent)
    services.decide(action.pk, by=rita.user, verdict="reject", note="no")
    assert not IssuedGrant.objects.exists()
    assert agent.client().get(f"/actions/{action.pk}/decision").json()["grant"] is None


def test_a_grant_re_read_after_rotation_is_byte_for_byte_the_first_over_rest_and_mcp(
    own_keys, agent, rita
):
    action = make_action(agent.agent)
    services.decide(
        action.pk, by=rita.user, verdict="approve", edits={"payload.amount_cents": 5000}
    )
    first = rest_grant(agent, action.pk)
    assert mcp_grant(agent, action.pk) == first
    old = kid_of(first)

    call_command("grantkey", "rotate", stdout=io.StringIO(), stderr=io.StringIO())
    new = grants.signing_key().kid
    assert new != old
    assert rest_grant(agent, action.pk) == first
    assert mcp_grant(agent, action.pk) == first
    # A decision made after the rotation is signed with the new key.
    later = make_action(agent.agent)
    services.decide(later.pk, by=rita.user, verdict="approve")
    assert kid_of(rest_grant(agent, later.pk)) == new

    # Even once the old key is retired, reads return the same bytes and a report carrying
    # them is taken: it is the grant Impri stored for this decision.
    call_command("grantkey", "retire", "--force", "--", old, stderr=io.StringIO())
    assert old not in {k["kid"] for k in grants.jwks()["keys"]}
    assert rest_grant(agent, action.pk) == first
    report = {"status": "executed", "grant": first}
    response = agent.client().post(f"/actions/{action.pk}/result", report)
    assert response.status_code == 200, response.content
    # A grant of that key for which nothing is stored is no longer taken.
    forged = jwt.encode(
        {**jwt.decode(first, options={"verify_signature": False}), "jti": "x"},
        "k" * 32,
        algorithm="HS256",
        headers={"kid": old},
    )
    with pytest.raises(grants.GrantError, match="not signed by one of this server's keys"):
        grants.check(forged, Action.objects.get(pk=later.pk))


def test_a_decision_from_before_stored_grants_is_signed_on_first_read_and_kept(
    own_keys, agent, rita
):
    action = make_action(agent.agent)
    services.decide(action.pk, by=rita.user, verdict="approve")
    IssuedGrant.objects.all().delete()  # as a decision made before this version
    call_command("grantkey", "rotate", stdout=io.StringIO(), stderr=io.StringIO())
    first = rest_grant(agent, action.pk)
    assert kid_of(first) == grants.signing_key().kid
    assert IssuedGrant.objects.get(action_id=action.pk).token == first
    call_command("grantkey", "rotate", stdout=io.StringIO(), stderr=io.StringIO())
    assert rest_grant(agent, action.pk) == first
    assert mcp_grant(agent, action.pk) == first


def test_first_reads_at_once_store_one_grant_and_all_return_it(own_keys, agent, rita):
    action = make_action(agent.agent)
    services.decide(action.pk, by=rita.user, verdict="approve")
    IssuedGrant.objects.all().delete()
    grants.signing_key()  # the key is read before the threads start
    readers = 6
    barrier = threading.Barrier(readers)
    got: list[str] = []
    errors: list[BaseException] = []

    def read() -> None:
        try:
            loaded = Action.objects.get(pk=action.pk)
            barrier.wait(timeout=10)
            got.append(grant_store.grant_for(loaded))
        except BaseException as exc:  # noqa: BLE001  (reported below)
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=read) for _ in range(readers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not errors, errors
    assert IssuedGrant.objects.filter(action_id=action.pk).count() == 1
    assert set(got) == {IssuedGrant.objects.get(action_id=action.pk).token}


async def test_the_mcp_read_of_an_approval_returns_the_stored_grant(own_keys, agent, rita):
    action = await sync_to_async(make_action)(agent.agent)
    await sync_to_async(services.decide)(action.pk, by=rita.user, verdict="approve")
    stored = await IssuedGrant.objects.aget(action_id=action.pk)
    assert await _mcp_grant(agent.key, action.pk) == stored.token
