"""/metrics: Prometheus series behind a bearer token, business figures read from the database."""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import Group
from django.test import Client, override_settings
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from approvals import services
from audit import verification
from plumbing import fallbacks
from tests.core.test_await import start_waiter
from tests.factories import install_rules, make_action, refund


@pytest.fixture(autouse=True)
def _public_callback_host(hosts):
    hosts["agent.example.com"] = ["93.184.215.14"]  # a public address, never contacted here


TOKEN = "scrape-me-0123456789"


def scrape(token: str | None = TOKEN):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return Client().get("/metrics", headers=headers)


def samples(response) -> dict[tuple[str, tuple], float]:
    """{(sample name, sorted labels): value} from an exposition."""
    assert response.status_code == 200, response.content
    found = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            found[sample.name, tuple(sorted(sample.labels.items()))] = sample.value
    return found


@pytest.fixture
def metrics_on(settings):
    settings.IMPRI_METRICS_TOKEN = TOKEN


@pytest.mark.django_db
def test_without_a_configured_token_metrics_are_off(settings):
    settings.IMPRI_METRICS_TOKEN = ""
    assert scrape().status_code == 404
    assert scrape(None).status_code == 404


@pytest.mark.django_db
def test_a_request_without_or_with_a_wrong_token_is_refused(metrics_on):
    for response in (
        scrape(None),
        scrape("wrong"),
        scrape(TOKEN + "x"),
        Client().get("/metrics", headers={"Authorization": f"Basic {TOKEN}"}),
    ):
        assert response.status_code == 401
        assert response["WWW-Authenticate"].startswith("Bearer")
        assert b"impri_" not in response.content


@pytest.mark.django_db
def test_business_series_follow_a_push_a_decision_and_a_report(metrics_on, agent, rita):
    install_rules()
    assert ("impri_actions_pushed_total", (("kind", "payment.refund"),)) not in samples(scrape())

    api = agent.client()
    small = api.post("/actions", refund(3000)).json()  # auto-approved by "small refunds"
    big = api.post("/actions", refund(9000)).json()  # reviewed by support-leads
    rita.user.groups.add(Group.objects.get(name="support-leads"))
    api.post("/actions", refund(2_000_000))  # auto-rejected
    pending = make_action(agent.agent, kind="email.send", title="Send the apology")
    assert rita.client().post(f"/actions/{big['action_id']}/approve", {}).status_code == 200
    assert (
        api.post(
            f"/actions/{small['action_id']}/result", {"status": "executed", "detail": "ok"}
        ).status_code
        == 200
    )
    verification.verify_and_record()

    got = samples(scrape())
    assert got["impri_actions_pushed_total", (("kind", "payment.refund"),)] == 3
    assert got["impri_actions_pushed_total", (("kind", "email.send"),)] == 1
    approved_small = (
        "impri_actions_settled_total",
        (("outcome", "approved"), ("rule", "small refunds")),
    )
    assert got[approved_small] == 1
    reviewed = (
        "impri_actions_settled_total",
        (("outcome", "approved"), ("rule", "everything else in payments")),
    )
    assert got[reviewed] == 1
    rejected = (
        "impri_actions_settled_total",
        (("outcome", "rejected"), ("rule", "absurd refunds")),
    )
    assert got[rejected] == 1
    assert got["impri_results_reported_total", (("status", "executed"),)] == 1
    assert got["impri_actions_pending", ()] == 1
    # One human decision, well under ten seconds after its push.
    assert got["impri_decision_seconds_count", ()] == 1
    assert got["impri_decision_seconds_bucket", (("le", "10.0"),)] == 1
    assert 0 < got["impri_decision_seconds_sum", ()] < 10
    assert (
        got["impri_budget_used", (("rule", "small refunds"), ("scope", f"agent#{agent.agent.pk}"))]
        == 3000
    )
    assert got["impri_budget_max", (("rule", "small refunds"),)] == 50000
    assert got["impri_audit_events", ()] >= 8
    assert got["impri_audit_chain_ok", ()] == 1
    assert got["impri_audit_chain_verified_events", ()] == got["impri_audit_events", ()]
    for lane in ("webhooks", "notifications"):
        assert ("impri_outbox_due", (("lane", lane),)) in got
        assert ("impri_outbox_oldest_due_seconds", (("lane", lane),)) in got
        assert ("impri_outbox_gave_up", (("lane", lane),)) in got
        assert ("impri_outbox_failing", (("lane", lane),)) in got
    assert ("impri_waiters", ()) in got
    assert ("impri_fallbacks_total", (("component", "cache"),)) in got
    assert pending.status == "pending"


@pytest.mark.django_db
def test_an_overdue_action_counts_as_expired_before_its_sweep(metrics_on, agent):
    action = make_action(agent.agent, expires_in_s=1)
    from approvals.models import Action

    Action.objects.filter(pk=action.pk).update(expires_at=timezone.now())
    got = samples(scrape())
    assert got["impri_actions_settled_total", (("outcome", "expired"), ("rule", ""))] == 1
    assert got["impri_actions_pending", ()] == 0


@pytest.mark.django_db
def test_the_outbox_backlog_shows_due_webhooks_and_their_age(metrics_on, agent):
    from datetime import timedelta

    from approvals.models import WebhookDelivery

    action = make_action(agent.agent, callback_url="https://agent.example.com/hook")
    services.cancel_action(action.pk, agent=agent.agent, reason="dup")
    WebhookDelivery.objects.update(next_attempt_at=timezone.now() - timedelta(seconds=120))
    got = samples(scrape())
    assert got["impri_outbox_due", (("lane", "webhooks"),)] == 1
    assert got["impri_outbox_oldest_due_seconds", (("lane", "webhooks"),)] >= 120


@pytest.mark.django_db
def test_a_broken_chain_reports_zero(metrics_on, agent):
    make_action(agent.agent)
    from audit.models import VerificationRun

    verification.verify_and_record()
    VerificationRun.objects.filter(pk=verification.latest().pk).update(ok=False, first_broken_seq=2)
    assert samples(scrape())["impri_audit_chain_ok", ()] == 0


@pytest.mark.django_db
def test_fail_soft_fallbacks_are_counted_per_component(metrics_on):
    before = samples(scrape())["impri_fallbacks_total", (("component", "broker"),)]
    fallbacks.note("broker", "test")
    assert samples(scrape())["impri_fallbacks_total", (("component", "broker"),)] == before + 1


@pytest.mark.django_db(transaction=True)
@override_settings(IMPRI_AWAIT_REREAD_S=30, IMPRI_METRICS_TOKEN=TOKEN)
async def test_waiters_and_wake_latency_are_per_process(agent, rita):
    action = await sync_to_async(make_action)(agent.agent)
    before = await sync_to_async(lambda: samples(scrape()))()
    waiter = await start_waiter(action, agent.agent)
    during = await sync_to_async(lambda: samples(scrape()))()
    assert during["impri_waiters", ()] == 1
    await sync_to_async(services.decide)(action.pk, by=rita.user, verdict="reject", note="no")
    assert (await asyncio.wait_for(waiter, 5)).status == "rejected"
    after = await sync_to_async(lambda: samples(scrape()))()
    assert after["impri_waiters", ()] == 0
    assert after["impri_wake_seconds_count", ()] == before["impri_wake_seconds_count", ()] + 1
    # Woken by the message, not by the 30 s re-read.
    assert after["impri_wake_seconds_bucket", (("le", "5.0"),)] == (
        before["impri_wake_seconds_bucket", (("le", "5.0"),)] + 1
    )


@pytest.mark.django_db
def test_agent_chosen_kinds_cannot_explode_the_series(metrics_on, agent, settings):
    from approvals.models import Action
    from ops import metrics

    settings.IMPRI_RATE_LIMIT_PER_MIN = 0
    make_action(agent.agent, kind="payment.refund")
    make_action(agent.agent, kind="payment.refund")
    for n in range(metrics.MAX_LABEL_VALUES + 5):
        make_action(agent.agent, kind=f"spam.kind{n:03d}")
    got = samples(scrape())
    kinds = {
        dict(labels)["kind"]: v
        for (name, labels), v in got.items()
        if name == "impri_actions_pushed_total"
    }
    assert len(kinds) == metrics.MAX_LABEL_VALUES
    assert kinds["payment.refund"] == 2
    assert sum(kinds.values()) == Action.objects.count()
    assert kinds["(other)"] == metrics.MAX_LABEL_VALUES + 5 - (metrics.MAX_LABEL_VALUES - 2)
