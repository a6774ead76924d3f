"""A gateway tool's money declaration reaches the action, so every money guard reads it.

The tool moves ``value`` in ``ccy``: names no detector would take for money, so
only the gateway's declaration (``money:`` in gateways.yaml, passed to
``push_action``) can hold the call to the Slack ceiling and to edit bounds.
"""

from __future__ import annotations

import pytest

from approvals import services as approvals
from approvals.errors import ImpriError
from approvals.models import Action, ActionStatus
from gateway import config, services
from gateway.models import Upstream
from tests.slack.test_slack import (  # noqa: F401  (slack, team: the fixtures, used by name)
    buttons,
    click,
    ephemeral_text,
    posted_message,
    slack,
    team,
)

GATEWAYS = """
gateways:
  - name: psp
    url: http://127.0.0.1:9/mcp
    default: deny
    tools:
      payout:
        policy: review
        editable: [value]
        money: [{amount: value, currency: ccy}]
"""


@pytest.fixture
def payout(db):
    config.replace_all(config.parse_yaml(GATEWAYS), by="test")
    return Upstream.objects.get(name="psp")


def test_a_gated_tool_with_declared_money_meets_the_slack_ceiling_and_its_edit_bounds(
    agent, settings, payout, request
):
    fake_slack, rita = request.getfixturevalue("slack"), request.getfixturevalue("team")
    settings.IMPRI_SLACK_MAX_APPROVE_CENTS = 50000
    arguments = {"to": "acct_1", "value": 90000, "ccy": "USD"}
    action = services.begin(agent.agent, payout, "payout", arguments)
    assert action.money == [{"amount": "payload.value", "currency": "payload.ccy"}]

    # Above the Slack ceiling: no approve button, and a forged click decides nothing.
    message = posted_message(fake_slack)
    assert "approve" not in [e["action_id"] for e in buttons(message)["elements"]]
    assert click(action, "approve").status_code == 200
    assert Action.objects.get(pk=action.pk).status == ActionStatus.PENDING
    assert "the most that may be approved from Slack" in ephemeral_text(fake_slack)

    # Bounded on edit: never above what the agent asked for.
    with pytest.raises(ImpriError) as raised:
        approvals.decide(
            action.pk,
            by=rita,
            verdict="approve",
            edits={"payload.value": 95000},
            approves_sha256=approvals.payload_sha256(action.payload),
        )
    assert raised.value.field == "edits.payload.value"
    assert Action.objects.get(pk=action.pk).status == ActionStatus.PENDING
    approved = approvals.decide(
        action.pk,
        by=rita,
        verdict="approve",
        edits={"payload.value": 40000},
        approves_sha256=approvals.payload_sha256(action.payload),
    )
    assert approved.status == ActionStatus.APPROVED and approved.payload["value"] == 40000


def test_a_call_breaking_its_money_declaration_is_refused_naming_the_argument(agent, payout):
    with pytest.raises(ImpriError) as raised:
        services.begin(
            agent.agent, payout, "payout", {"to": "acct_1", "value": 100, "ccy": "dollars"}
        )
    assert raised.value.status_code == 422
    assert "payload.ccy" in f"{raised.value.field} {raised.value.message}"
    assert not Action.objects.exists()


NO_MONEY = """
gateways:
  - name: crm
    url: http://127.0.0.1:9/mcp
    default: deny
    tools:
      tag:
        policy: review
        money: []
      note:
        policy: review
"""


@pytest.fixture
def crm(db):
    config.replace_all(config.parse_yaml(NO_MONEY), by="test")
    return Upstream.objects.get(name="crm")


def test_a_tool_declaring_money_none_flows_as_declared_and_one_saying_nothing_is_held(agent, crm):
    """``money: []`` declares that the tool moves no money: an auto_approve rule approves it.
    A tool whose ``money:`` is absent declares nothing: the closed world holds it for review."""
    from tests.factories import install_rules

    install_rules("rules:\n  - {name: crm calls, kind: 'mcp.crm.*', then: auto_approve}\n")
    tagged = services.begin(agent.agent, crm, "tag", {"customer": "c_1", "tag": "vip"})
    assert tagged.money == []
    assert tagged.status == ActionStatus.APPROVED
    noted = services.begin(agent.agent, crm, "note", {"customer": "c_1", "text": "hi"})
    assert noted.money is None
    assert noted.status == ActionStatus.PENDING
    assert "kind not declared" in noted.rule_trace[-1]["why"]


def test_money_none_and_absent_survive_an_export(crm):
    exported = config.export_yaml()
    by_tool = {p.tool: p.money for p in config.parse_yaml(exported)[0].policies}
    assert by_tool == {"tag": [], "note": None}


@pytest.mark.django_db(transaction=True)
def test_the_upgrade_reads_a_money_stored_empty_as_not_declared():
    """Before gateway 0003 an absent ``money:`` was stored as ``[]``; it stays undeclared."""
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    def migrate(targets):
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(targets)
        return executor.loader.project_state(targets).apps

    apps = migrate([("gateway", "0002_pinned_tools")])
    try:
        upstream = apps.get_model("gateway", "Upstream").objects.create(
            name="old", url="http://127.0.0.1:9/mcp"
        )
        ToolPolicy = apps.get_model("gateway", "ToolPolicy")
        declared = [{"amount": "value", "currency": "USD", "minor_units": True, "sign": "positive"}]
        ToolPolicy.objects.create(upstream=upstream, tool="note", policy="review", money=[])
        ToolPolicy.objects.create(upstream=upstream, tool="pay", policy="review", money=declared)
        apps = migrate([("gateway", "0003_tool_money_undeclared")])
        got = {p.tool: p.money for p in apps.get_model("gateway", "ToolPolicy").objects.all()}
        assert got == {"note": None, "pay": declared}
    finally:
        migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())
