"""The third answer (request changes), supersedes, claims, and what the action page tells a reviewer."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from approvals import reviewer_claims, services
from approvals.errors import ActionNotPending, InvalidInput, ResultConflict
from approvals.models import ActionStatus, Claim, WebhookDelivery
from audit.models import AuditEvent
from ops import metrics
from tests.factories import make_action, refund_body


def browser(persona) -> Client:
    client = Client()
    client.force_login(persona.user)
    return client


def html(response) -> str:
    return response.content.decode()


# --- Request changes over REST -----------------------------------------------------------


def test_request_changes_settles_the_action_with_the_message(agent, rita, hosts):
    hosts["agent.example.test"] = ["93.184.215.14"]  # a public address, resolved by no DNS
    action = make_action(agent.agent, callback_url="https://agent.example.test/hook")
    response = rita.client().post(
        f"/actions/{action.pk}/request-changes", {"note": "Refund the mug only: $12"}
    )
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["status"] == "changes_requested"
    assert body["note"] == "Refund the mug only: $12"
    assert body["decided_by"] == {"type": "reviewer", "name": "rita"}
    action.refresh_from_db()
    assert action.status == ActionStatus.CHANGES_REQUESTED
    assert action.is_settled and not action.was_approved
    event = AuditEvent.objects.get(action_id=action.pk, event="action.changes_requested")
    assert event.actor_id == "rita"
    assert event.data["note"] == "Refund the mug only: $12"
    # The agent's webhook says so, with the message, and no grant.
    delivery = WebhookDelivery.objects.get(action=action)
    assert delivery.event == "action.changes_requested"
    assert delivery.body["status"] == "changes_requested"
    assert delivery.body["note"] == "Refund the mug only: $12"
    assert delivery.body["grant"] is None


def test_the_waiting_agent_gets_changes_requested_with_the_message(agent, rita):
    action = make_action(agent.agent)
    rita.client().post(f"/actions/{action.pk}/request-changes", {"note": "wrong order id"})
    answer = agent.client().get(f"/actions/{action.pk}/decision", timeout_s=0)
    assert answer.status_code == 200
    decision = answer.json()
    assert decision["status"] == "changes_requested"
    assert decision["note"] == "wrong order id"
    assert decision["grant"] is None and decision["payload_sha256"] is None


def test_no_report_follows_a_request_for_changes(agent, rita):
    action = make_action(agent.agent)
    services.request_changes(action.pk, by=rita.user, note="no")
    response = agent.client().post(f"/actions/{action.pk}/result", {"status": "executed"})
    assert response.status_code == 409
    assert "changes_requested" in response.json()["detail"]
    with pytest.raises(ResultConflict):
        services.report_result(action.pk, agent=agent.agent, status="executed")


def test_a_request_for_changes_needs_a_message(agent, rita):
    action = make_action(agent.agent)
    for body in ({}, {"note": ""}, {"note": "   "}):
        response = rita.client().post(f"/actions/{action.pk}/request-changes", body)
        assert response.status_code == 422, body
        assert response.json()["field"] == "note"
    with pytest.raises(InvalidInput):
        services.request_changes(action.pk, by=rita.user, note=" ")
    action.refresh_from_db()
    assert action.status == ActionStatus.PENDING


def test_request_changes_is_for_reviewers_of_the_group_and_pending_actions(agent, rita, mallory):
    action = make_action(agent.agent)
    assert mallory.client().post(
        f"/actions/{action.pk}/request-changes", {"note": "x"}
    ).status_code in (403, 404)
    assert (
        agent.client().post(f"/actions/{action.pk}/request-changes", {"note": "x"}).status_code
        == 403
    )
    services.decide(action.pk, by=rita.user, verdict="reject")
    response = rita.client().post(f"/actions/{action.pk}/request-changes", {"note": "late"})
    assert response.status_code == 409
    with pytest.raises(ActionNotPending):
        services.request_changes(action.pk, by=rita.user, note="late")


def test_a_retry_with_the_same_key_answers_the_same(agent, rita):
    action = make_action(agent.agent)
    headers = {"Idempotency-Key": "changes-1"}
    first = rita.client().post(f"/actions/{action.pk}/request-changes", {"note": "x"}, headers)
    again = rita.client().post(f"/actions/{action.pk}/request-changes", {"note": "x"}, headers)
    assert first.status_code == again.status_code == 200
    assert again.json()["status"] == "changes_requested"


def test_metrics_count_changes_requested_as_their_own_outcome(agent, rita):
    action = make_action(agent.agent)
    services.request_changes(action.pk, by=rita.user, note="x")
    (settled, _) = list(metrics.actions_settled(timezone.now()))
    outcomes = {sample.labels["outcome"]: sample.value for sample in settled.samples}
    assert outcomes.get("changes_requested") == 1
    assert "approved" not in outcomes


def test_the_list_filters_by_changes_requested(agent, rita):
    asked = make_action(agent.agent)
    make_action(agent.agent)
    services.request_changes(asked.pk, by=rita.user, note="x")
    page = agent.client().get("/actions", status="changes_requested").json()
    assert [item["action_id"] for item in page["items"]] == [asked.pk]


# --- Supersedes ---------------------------------------------------------------------------


def test_the_next_push_names_the_action_it_replaces(agent, rita):
    first = make_action(agent.agent)
    services.request_changes(first.pk, by=rita.user, note="refund $12 only")
    body = refund_body(title="Refund $12.00 on order 10432", supersedes=first.pk)
    body["payload"] = {**body["payload"], "amount_cents": 1200}
    response = agent.client().post("/actions", body)
    assert response.status_code == 201, response.content
    assert response.json()["supersedes"] == first.pk
    second_id = response.json()["action_id"]
    pushed = AuditEvent.objects.get(action_id=second_id, event="action.pushed")
    assert pushed.data["supersedes"] == first.pk

    reviewer = browser(rita)
    new_page = html(reviewer.get(f"/inbox/actions/{second_id}"))
    assert f'href="/inbox/actions/{first.pk}" data-supersedes' in new_page
    assert "refund $12 only" in new_page
    old_page = html(reviewer.get(f"/inbox/actions/{first.pk}"))
    assert f'href="/inbox/actions/{second_id}" data-superseded-by' in old_page
    assert "replaces an earlier action" in html(reviewer.get("/inbox/"))


@pytest.mark.parametrize("case", ["unknown", "other_agent", "pending", "approved", "taken"])
def test_supersedes_is_validated(agent, other_agent, rita, case):
    target = make_action(agent.agent)
    if case == "unknown":
        named = "act_doesnotexist"
    elif case == "other_agent":
        foreign = make_action(other_agent.agent)
        services.decide(foreign.pk, by=rita.user, verdict="reject")
        named = foreign.pk
    elif case == "pending":
        named = target.pk
    elif case == "approved":
        services.decide(target.pk, by=rita.user, verdict="approve")
        named = target.pk
    else:
        services.request_changes(target.pk, by=rita.user, note="x")
        make_action(agent.agent, supersedes=target.pk)
        named = target.pk
    response = agent.client().post("/actions", refund_body(supersedes=named))
    assert response.status_code == 422, response.content
    assert response.json()["field"] == "supersedes"


def test_supersedes_must_look_like_an_action_id(agent):
    response = agent.client().post("/actions", refund_body(supersedes="act/../x"))
    assert response.status_code == 422
    assert "supersedes" in response.json()["field"]


# --- The inbox ------------------------------------------------------------------------------


def test_request_changes_from_the_action_page(agent, rita):
    action = make_action(agent.agent)
    reviewer = browser(rita)
    page = html(reviewer.get(f"/inbox/actions/{action.pk}"))
    assert "Request changes" in page
    empty = reviewer.post(
        f"/inbox/actions/{action.pk}/decide", {"changes-verdict": "changes", "changes-note": ""}
    )
    assert empty.status_code == 422
    assert "This field is required" in html(empty)
    response = reviewer.post(
        f"/inbox/actions/{action.pk}/decide",
        {"changes-verdict": "changes", "changes-note": "Only the mug, please"},
    )
    assert response.status_code == 302
    action.refresh_from_db()
    assert action.status == ActionStatus.CHANGES_REQUESTED
    assert action.note == "Only the mug, please"
    settled = html(reviewer.get(f"/inbox/actions/{action.pk}"))
    assert "Changes requested</strong> by <strong>you" in settled
    assert "Only the mug, please" in settled
    assert "requested changes" in settled  # in the list of reviews
    assert f'id="row-{action.pk}"' in html(reviewer.get("/inbox/decided/"))


# --- Claims ------------------------------------------------------------------------------


def test_a_claim_is_shown_to_others_and_runs_out(agent, rita, sam):
    action = make_action(agent.agent)
    rita_browser, sam_browser = browser(rita), browser(sam)
    assert rita_browser.post(f"/inbox/actions/{action.pk}/claim").status_code == 302
    assert "rita is on it" in html(sam_browser.get("/inbox/"))
    assert "rita is on it" in html(sam_browser.get(f"/inbox/actions/{action.pk}"))
    assert "You are on it" in html(rita_browser.get(f"/inbox/actions/{action.pk}"))
    # Advisory: sam may still decide.
    services.decide(action.pk, by=sam.user, verdict="reject")
    assert reviewer_claims.current(action.__class__.objects.get(pk=action.pk)) is None

    other = make_action(agent.agent)
    rita_browser.post(f"/inbox/actions/{other.pk}/claim")
    Claim.objects.filter(action=other).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert "rita is on it" not in html(sam_browser.get("/inbox/"))
    assert reviewer_claims.current(other) is None


def test_a_claim_is_released_by_its_reviewer_only(agent, rita, sam):
    action = make_action(agent.agent)
    reviewer_claims.claim(action, rita.user)
    assert reviewer_claims.release(action, sam.user) is False
    assert reviewer_claims.current(action).user == rita.user
    beacon = browser(rita).post(
        f"/inbox/actions/{action.pk}/claim", {"release": "1", "beacon": "1"}
    )
    assert beacon.status_code == 204
    assert reviewer_claims.current(action) is None


def test_an_outsider_cannot_claim(agent, mallory):
    action = make_action(agent.agent)
    assert browser(mallory).post(f"/inbox/actions/{action.pk}/claim").status_code == 404
    assert not Claim.objects.exists()


# --- What the action page says ------------------------------------------------------------


def test_the_page_shows_the_result_and_who_executed_it(agent, rita):
    action = make_action(agent.agent)
    services.decide(action.pk, by=rita.user, verdict="approve")
    services.report_result(
        action.pk, agent=agent.agent, status="executed", detail={"transaction_id": "re_3MtwBw"}
    )
    page = html(browser(rita).get(f"/inbox/actions/{action.pk}"))
    assert 'id="result"' in page
    assert "Executed by the agent <strong>support-bot</strong>" in page
    assert "re_3MtwBw" in page and "Transaction id" in page
    assert "Approved</strong> by <strong>you" in page  # rita approved; the agent executed
    assert "Executed</strong> by <strong>you" not in page


def test_a_reviewers_own_edit_raises_no_mismatch_warning(agent, rita):
    action = make_action(agent.agent)  # "Refund $84.00" over 8400 cents: they agree
    services.decide(
        action.pk, by=rita.user, verdict="approve", edits={"payload.amount_cents": 5000}
    )
    page = html(browser(rita).get(f"/inbox/actions/{action.pk}"))
    assert 'id="amount-warning"' not in page
    lying = make_action(agent.agent, title="Refund $8.40 on order 10432")
    page = html(browser(rita).get(f"/inbox/actions/{lying.pk}"))
    assert 'id="amount-warning"' in page
    assert "The payload asks to refund <strong>$84.00 USD</strong>" in page


def test_a_kind_without_money_reads_as_a_sentence(agent, rita):
    action = make_action(
        agent.agent,
        kind="email.send",
        title="Apologise to the customer",
        payload={"subject": "Sorry about the mug", "to": "ada@example.com", "body": "x" * 500},
        editable=[],
    )
    page = html(browser(rita).get(f"/inbox/actions/{action.pk}"))
    line = page.split('<p class="outcome">', 1)[1].split("</p>", 1)[0]
    assert "Send email" in line
    assert "to <strong" in line and "ada@example.com" in line
    assert "subject <strong" in line and "Sorry about the mug" in line
    assert "x" * 100 not in line  # long values stay in the payload table
    deploy = make_action(
        agent.agent,
        kind="deploy.production",
        title="Ship it",
        payload={"service": "billing", "version": "2.4.1"},
        editable=[],
    )
    line = html(browser(rita).get(f"/inbox/actions/{deploy.pk}")).split('<p class="outcome">')[1]
    assert line.split("</p>")[0].split("·")[0].strip() == "Deploy production"


@pytest.mark.django_db(transaction=True)
def test_two_pushes_replacing_one_action_at_once_give_one_successor(agent, rita):
    from approvals.schemas import ActionIn
    from tests.threads import run_together

    target = make_action(agent.agent)
    services.request_changes(target.pk, by=rita.user, note="refund the shipping only")

    def push(order: str):
        def call():
            body = refund_body(
                supersedes=target.pk,
                payload={"order_id": order, "amount_cents": 500, "currency": "USD"},
            )
            try:
                return services.push_action(agent.agent, ActionIn(**body))[0].pk
            except InvalidInput as exc:
                return exc

        return call

    outcomes = run_together([push("A"), push("B")])
    created = [o for o in outcomes if isinstance(o, str)]
    refused = [o for o in outcomes if isinstance(o, InvalidInput)]
    assert len(created) == 1 and len(refused) == 1, outcomes
    assert refused[0].field == "supersedes"
    assert f"already replaced by {created[0]}" in str(refused[0])
