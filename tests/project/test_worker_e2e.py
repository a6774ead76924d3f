"""Background delivery in real processes: webhooks and Slack through whatever runs the sweeps.

Scaled leg (REDIS_URL set): `impri worker` and `impri beat` subprocesses on the
Redis broker, beside an `impri serve` that runs no sweeps of its own. Embedded
leg: a single `impri serve`, whose in-process ticker runs the same sweeps.

The central test kills the sender (SIGKILL, the whole worker process group;
on the embedded leg the server itself) while the receiver holds the first
request open, starts a new one, and expects the message to arrive again with
the same ``webhook-id``: at-least-once delivery, with no message lost.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import httpx
import pytest

from tests.conftest import SCALED
from tests.delivery.test_webhooks import Receiver
from tests.factories import refund_body
from tests.live import Deployment

pytestmark = pytest.mark.e2e

LEASE_S = 3  # the lease a killed sender leaves behind (IMPRI_WEBHOOK_LEASE_S)
TICK_S = 0.5


class Background:
    """What runs the sweeps for one deployment: a Celery worker + beat, or the serve ticker."""

    def __init__(self, deployment: Deployment):
        self.deployment = deployment
        self.workers: list[subprocess.Popen] = []
        self.beat: subprocess.Popen | None = None
        self.server = deployment.start_server()

    def _spawn(self, name: str, *args: str) -> subprocess.Popen:
        log = open(self.deployment.data_dir / f"{name}-{time.monotonic_ns()}.log", "w")  # noqa: SIM115
        return subprocess.Popen(
            [sys.executable, "-m", "impri", *args],
            env=self.deployment.env,
            cwd=self.deployment.data_dir,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: SIGKILL reaches the pool children too
        )

    def start(self) -> None:
        if not SCALED:
            if self.server.process.poll() is not None:
                self.server = self.deployment.start_server()
            return
        self.workers.append(self._spawn("worker", "worker", "--concurrency=1"))
        if self.beat is None:
            self.beat = self._spawn("beat", "beat")

    def kill_sender(self) -> None:
        """SIGKILL whatever is sending right now: no shutdown handler runs."""
        if SCALED:
            worker = self.workers[-1]
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait(timeout=30)
        else:
            self.server.process.send_signal(signal.SIGKILL)
            self.server.process.wait(timeout=30)

    def logs(self) -> str:
        return "\n".join(
            f"--- {path.name}\n{path.read_text(errors='replace')[-4000:]}"
            for path in sorted(self.deployment.data_dir.glob("*.log"))
        )

    def close(self) -> None:
        for process in [*self.workers, *([self.beat] if self.beat else [])]:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
                try:
                    process.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()


@pytest.fixture
def deployment():
    # The receivers listen on 127.0.0.1: allowed as an operator would allow an internal one.
    dep = Deployment(
        IMPRI_WEBHOOK_LEASE_S=str(LEASE_S),
        IMPRI_TICK_S=str(TICK_S),
        IMPRI_CALLBACK_ALLOWED_NETWORKS="127.0.0.1/32",
    )
    yield dep
    dep.close()


@pytest.fixture
def background(deployment):
    runner = Background(deployment)
    yield runner
    runner.close()


@pytest.fixture
def receivers():
    made: list[Receiver] = []

    def make(*args, **kwargs) -> Receiver:
        receiver = Receiver(*args, **kwargs)
        made.append(receiver)
        return receiver

    yield make
    for receiver in made:
        receiver.close()


def django_shell(deployment: Deployment, code: str) -> str:
    """Run Python in the deployment (its database) and return the last line it printed."""
    done = deployment.impri("shell", "--no-imports", "-c", code)
    return done.stdout.strip().splitlines()[-1]


def agent_with_secret(deployment: Deployment, name: str) -> tuple[str, str]:
    key = deployment.last_word("createagent", name)
    secret = django_shell(
        deployment,
        "from approvals.models import Agent; "
        f"print(Agent.objects.get(name={name!r}).webhook_secret)",
    )
    return key, secret


def reviewer_token(deployment: Deployment) -> str:
    deployment.impri("createreviewer", "rita", "--password", "rita-password")
    return deployment.last_word("token", "rita")


def push(server, key: str, **overrides) -> dict:
    response = server.client(key).post("/actions", json=refund_body(**overrides))
    assert response.status_code == 201, response.text
    return response.json()


def deliveries(deployment: Deployment, action_id: str) -> list[dict]:
    code = (
        "import json; from approvals.models import WebhookDelivery as D; "
        f"print(json.dumps([{{'id': d.id, 'event': d.event, 'attempts': d.attempts, "
        "'delivered': d.delivered_at is not None, 'gave_up': d.gave_up_at is not None, "
        "'log': [[a.status_code, a.error] for a in d.attempt_log.all()]} "
        f"for d in D.objects.filter(action_id={action_id!r})]))"
    )
    return json.loads(django_shell(deployment, code))


def poll(check, timeout: float, what: str, logs=lambda: ""):
    """Bounded poll of another process's state (there is nothing in this process to await)."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}\n{logs()}")
        time.sleep(0.5)


def test_a_killed_sender_still_ends_in_delivery_with_the_same_webhook_id(
    deployment, background, receivers
):
    agent_key, secret = agent_with_secret(deployment, "e2e-bot")
    rita = reviewer_token(deployment)
    receiver = receivers(secret, hold_first=True)
    background.start()

    action = push(background.server, agent_key, callback_url=receiver.url)
    approved = background.server.client(rita).post(f"/actions/{action['action_id']}/approve")
    assert approved.status_code == 200, approved.text

    try:
        [first] = receiver.wait_for(1, timeout=60)
    except AssertionError:
        raise AssertionError(background.logs()) from None
    assert first.verified
    assert first.json["action_id"] == action["action_id"]
    assert first.json["status"] == "approved"

    # The sender is inside the POST, waiting for an answer that never comes: kill it.
    background.kill_sender()
    receiver.release()
    background.start()

    try:
        requests = receiver.wait_for(2, timeout=LEASE_S + 90)
    except AssertionError:
        raise AssertionError(background.logs()) from None
    second = requests[1]
    assert second.verified
    assert second.headers["webhook-id"] == first.headers["webhook-id"]
    assert second.body == first.body
    assert int(second.headers["webhook-timestamp"]) >= int(first.headers["webhook-timestamp"])

    [row] = poll(
        lambda: [d for d in deliveries(deployment, action["action_id"]) if d["delivered"]],
        timeout=30,
        what="the delivery to be recorded",
        logs=background.logs,
    )
    assert row["id"] == first.headers["webhook-id"]
    assert row["event"] == "action.approved"
    assert row["attempts"] == 2
    # The killed attempt is on record too: it shows that its worker stopped mid-send.
    assert [status for status, _ in row["log"]] == [None, 200]
    assert "worker stopped" in row["log"][0][1]
    assert len(receiver.requests) == 2  # delivered: nothing more is sent


def test_an_expiry_is_announced_to_the_agent_by_the_background_sweeps(
    deployment, background, receivers
):
    agent_key, secret = agent_with_secret(deployment, "e2e-bot")
    receiver = receivers(secret)
    background.start()

    action = push(background.server, agent_key, callback_url=receiver.url, expires_in_s=1)

    try:
        [got] = receiver.wait_for(1, timeout=60)
    except AssertionError:
        raise AssertionError(background.logs()) from None
    assert got.verified
    assert got.json["action_id"] == action["action_id"]
    assert got.json["status"] == "expired"
    assert got.json["decided_by"] == {"type": "system", "name": "expiry"}
    # The webhook carries what a waiting agent would have been told.
    decision = background.server.client(agent_key).get(
        f"/actions/{action['action_id']}/decision", params={"timeout_s": 1}
    )
    assert got.json == json.loads(decision.text)


def test_a_new_action_reaches_the_groups_slack(deployment, background, receivers):
    agent_key, _ = agent_with_secret(deployment, "e2e-bot")
    reviewer_token(deployment)
    slack = receivers()
    django_shell(
        deployment,
        "from django.contrib.auth.models import Group; "
        "from approvals.models import GroupNotificationSettings as S; "
        "g, _ = Group.objects.get_or_create(name='reviewers'); "
        f"S.objects.update_or_create(group=g, defaults={{'slack_webhook_url': {slack.url!r}}}); "
        "print('ok')",
    )
    background.start()

    action = push(background.server, agent_key)

    try:
        [got] = slack.wait_for(1, timeout=60)
    except AssertionError:
        raise AssertionError(background.logs()) from None
    message = got.json
    assert "Refund $84.00 on order 10432" in message["text"]
    assert "$84.00 USD" in message["text"]
    assert "e2e-bot" in message["text"]
    assert f"/inbox/actions/{action['action_id']}|" in message["text"]
    # The link opens the action's page; it does not decide anything.
    link = message["text"].split("<", 1)[1].split("|", 1)[0]
    path = "/" + link.split("://", 1)[1].split("/", 1)[1]  # IMPRI_BASE_URL is not this server
    page = httpx.get(background.server.url + path, follow_redirects=False, timeout=10)
    assert page.status_code in (200, 302)
    status = background.server.client(agent_key).get(f"/actions/{action['action_id']}")
    assert status.json()["status"] == "pending"


def test_a_receiver_that_never_answers_delays_no_one_elses_webhook_or_notice(
    deployment, background, receivers
):
    # Nine callbacks to a host that accepts and never answers (each costs the
    # 10 s request timeout), then another agent's webhook and a reviewer's
    # Slack notice: both arrive well inside that timeout.
    from tests.delivery.test_outbound import Staller

    staller = Staller()
    try:
        slow_key, _ = agent_with_secret(deployment, "slow-bot")
        fast_key, fast_secret = agent_with_secret(deployment, "fast-bot")
        healthy, slack = receivers(fast_secret), receivers()
        django_shell(
            deployment,
            "from django.contrib.auth.models import Group; "
            "from approvals.models import GroupNotificationSettings as S; "
            "g, _ = Group.objects.get_or_create(name='reviewers'); "
            f"S.objects.update_or_create(group=g, defaults={{'slack_webhook_url': {slack.url!r}}}); "
            "print('ok')",
        )
        background.start()
        for _ in range(9):
            stalled = push(background.server, slow_key, callback_url=staller.url)
            cancel = background.server.client(slow_key).post(
                f"/actions/{stalled['action_id']}/cancel", json={}
            )
            assert cancel.status_code == 200, cancel.text
        poll(lambda: staller.accepted, 30, "the stalled sends to begin", background.logs)

        started = time.monotonic()
        waiting = push(background.server, fast_key)  # stays pending: its group is told
        settled = push(background.server, fast_key, callback_url=healthy.url)
        cancel = background.server.client(fast_key).post(
            f"/actions/{settled['action_id']}/cancel", json={}
        )
        assert cancel.status_code == 200, cancel.text
        try:
            [got] = healthy.wait_for(1, timeout=8)
            poll(
                lambda: any(waiting["action_id"] in r.json["text"] for r in slack.requests),
                8,
                "the reviewers' Slack notice",
                background.logs,
            )
        except AssertionError:
            raise AssertionError(background.logs()) from None
        took = time.monotonic() - started
        assert took < 8, f"the healthy webhook and notice took {took:.1f} s"
        assert got.verified and got.json["action_id"] == settled["action_id"]
        assert len(staller.accepted) <= 2  # IMPRI_DELIVERY_PER_DESTINATION's default
    finally:
        staller.close()
