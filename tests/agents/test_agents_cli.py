"""`impri agents` and `impri webhooksecret`: an agent's webhook secret from the command line.

Deliveries go to a real receiver on 127.0.0.1 and are verified with the `standardwebhooks`
package (the Standard Webhooks reference library), which shares no code with Impri.
"""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from approvals.models import WebhookDelivery
from audit.models import AuditEvent
from delivery import webhooks
from tests.delivery.test_webhooks import Receiver
from tests.factories import make_action


def run(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def secret_of(*args: str) -> str:
    return run("webhooksecret", *args)[0].strip().splitlines()[-1]


@pytest.fixture
def receiver(settings):
    settings.IMPRI_CALLBACK_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    made = Receiver()
    yield made
    made.close()


def deliver(agent, receiver: Receiver) -> tuple[bytes, dict]:
    """One approved callback to ``receiver``, sent the way the worker sends it."""
    action = make_action(agent.agent, idempotency_key=f"hook-{len(receiver.requests)}")
    WebhookDelivery.objects.create(
        action=action, event="action.approved", url=receiver.url, body={"action_id": action.pk}
    )
    assert webhooks.deliver_due() == 1
    got = receiver.requests[-1]
    return got.body, got.headers


def test_the_printed_secret_verifies_a_delivery_and_rotate_replaces_it(agent, receiver):
    printed = secret_of(agent.agent.name)
    assert printed.startswith("whsec_")

    body, headers = deliver(agent, receiver)
    Webhook(printed).verify(body, headers)  # raises unless it verifies

    out, err = run("webhooksecret", agent.agent.name, "--rotate")
    rotated = out.strip().splitlines()[-1]
    assert rotated.startswith("whsec_") and rotated != printed
    assert "replaced" in err
    assert secret_of(agent.agent.name) == rotated  # the new one, from now on
    event = AuditEvent.objects.get(event="agent.webhook_secret_rotated")
    assert event.actor_id.startswith("cli:")
    assert event.data["agent"] == agent.agent.name
    assert printed not in str(event.data) and rotated not in str(event.data)

    body, headers = deliver(agent, receiver)
    Webhook(rotated).verify(body, headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(printed).verify(body, headers)


def test_an_unknown_agent_is_one_line_naming_the_list(db):
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="no agent named 'ghost'.*impri agents"):
        run("webhooksecret", "ghost")


def test_agents_lists_name_owners_keys_created_and_last_used(agent, other_agent, rita):
    agent.agent.owners.add(rita.user)
    agent.client().get("/actions")  # the key is used once
    out, _ = run("agents")
    header, *rows = out.strip().splitlines()
    assert header.split() == ["NAME", "OWNERS", "KEYS", "CREATED", "LAST", "USED"]
    line = next(r for r in rows if r.startswith(agent.agent.name + " "))
    assert rita.user.username in line
    assert " 1 " in line
    assert "never" not in line  # last used: now
    other = next(r for r in rows if r.startswith(other_agent.agent.name + " "))
    assert other.rstrip().endswith("never")
