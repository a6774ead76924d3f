"""Gateway configuration and bookkeeping, in process: YAML, secrets, kinds, titles, attach, claim."""

from __future__ import annotations

from pathlib import Path

import pytest

from approvals import services as approvals
from approvals.models import ActionStatus
from gateway import config, services
from gateway.models import GatedCall, Policy, ToolPolicy, Upstream
from gateway.upstream import Target, UpstreamError, expand
from rules import services as rule_services

EXAMPLE = """
gateways:
  - name: payments
    url: https://mcp.example-psp.test/mcp
    headers: {Authorization: "Bearer ${PSP_TOKEN}", X-Tenant: acme}
    default: deny
    tools:
      create_refund:  {policy: review, editable: [amount_cents], title: "Refund {amount_cents} cents on order {order_id}"}
      get_order:      {policy: allow, redact: true}
      delete_customer: {policy: deny}
  - name: files
    command: ["npx", "-y", "some-mcp-server"]
    env: {API_KEY: "${FILES_KEY}"}
    default: allow
"""


def test_parses_the_documented_example():
    parsed = config.parse_yaml(EXAMPLE)
    payments, files = parsed
    assert payments.upstream.name == "payments"
    assert payments.upstream.default_policy == "deny"
    assert {p.tool: p.policy for p in payments.policies} == {
        "create_refund": "review",
        "get_order": "allow",
        "delete_customer": "deny",
    }
    assert payments.policies[0].editable == ["amount_cents"]
    assert files.upstream.command == ["npx", "-y", "some-mcp-server"]


@pytest.mark.parametrize(
    "text, problem",
    [
        ("gateways: [{name: p, url: 'http://x/mcp', command: [a]}]", "either url or command"),
        ("gateways: [{name: p}]", "either url or command"),
        ("gateways: [{name: P!, url: 'http://x/mcp'}]", "name"),
        ("gateways: [{name: p, url: 'ftp://x'}]", "http(s)"),
        ("gateways: [{name: p, url: 'http://x', default: maybe}]", "default must be one of"),
        ("gateways: [{name: p, url: 'http://x', colour: red}]", "unknown key 'colour'"),
        ("gateways: [{name: p, url: 'http://x', tools: {t: {policy: sometimes}}}]", "tools.t"),
        (
            "gateways: [{name: p, url: 'http://x', tools: {t: {policy: allow, editable: 3}}}]",
            "editable",
        ),
        ("gateways: [{name: p, url: 'http://x'}, {name: p, url: 'http://y'}]", "used twice"),
        (
            "gateways: [{name: p, url: 'http://x', headers: {Authorization: Bearer abc}}]",
            "headers.Authorization",
        ),
        ("gateways: [{name: p, command: [x], env: {GITHUB_TOKEN: ghp_123}}]", "env.GITHUB_TOKEN"),
        ("gateways: [unclosed", "not YAML"),
    ],
)
def test_refuses_a_bad_file_naming_the_part(text, problem):
    with pytest.raises(config.ConfigError, match=None) as caught:
        config.parse_yaml(text)
    assert problem in str(caught.value)


def test_import_replaces_everything_and_export_keeps_references(db):
    Upstream.objects.create(name="old", url="http://old.test/mcp")
    config.replace_all(config.parse_yaml(EXAMPLE), by="test")
    assert sorted(Upstream.objects.values_list("name", flat=True)) == ["files", "payments"]
    exported = config.export_yaml()
    assert "Bearer ${PSP_TOKEN}" in exported and "${FILES_KEY}" in exported
    config.replace_all(config.parse_yaml(exported), by="test")
    assert config.export_yaml() == exported  # export, import, export: nothing lost
    assert ToolPolicy.objects.get(tool="get_order").redact is True
    # Importing again is a replacement, not an addition.
    config.replace_all(config.parse_yaml(EXAMPLE), by="test")
    assert ToolPolicy.objects.count() == 3


def test_secrets_come_from_the_environment_at_call_time(monkeypatch):
    monkeypatch.setenv("PSP_TOKEN", "s3cret")
    assert expand("Bearer ${PSP_TOKEN}", "headers") == "Bearer s3cret"
    monkeypatch.delenv("PSP_TOKEN")
    with pytest.raises(UpstreamError, match=r"\$\{PSP_TOKEN\}"):
        expand("Bearer ${PSP_TOKEN}", "headers")


def test_kind_keeps_the_tool_name_lowercased():
    from approvals.schemas import KIND_RE

    assert services.kind_for("payments", "create_refund") == "mcp.payments.create_refund"
    assert services.kind_for("everything", "get-sum") == "mcp.everything.get-sum"
    assert services.kind_for("Pay-Ments", "Create Refund!") == "mcp.pay-ments.create_refund_"
    assert services.kind_for("fs", "files.read") == "mcp.fs.files.read"
    for odd in (".x", "x.", "a..b", "", "ünïcode", "x" * 200):
        assert KIND_RE.fullmatch(services.kind_for("gw", odd)), odd


def test_title_template_fills_arguments_and_keeps_missing_fields():
    policy = ToolPolicy(
        tool="create_refund", policy="review", title="Refund {amount_cents} on {order_id} {nope}"
    )
    title = services.title_for(
        policy, "payments", "create_refund", {"amount_cents": 8400, "order_id": "A1"}
    )
    assert title == "Refund 8400 on A1 {nope}"
    untitled = ToolPolicy(tool="t", policy="review")
    assert services.title_for(untitled, "payments", "t", {}) == "t via payments"


@pytest.fixture
def payments(db):
    config.replace_all(config.parse_yaml(EXAMPLE), by="test")
    return Upstream.objects.get(name="payments")


def test_a_rule_naming_the_kind_gates_an_allowed_tool(payments):
    assert services.effective(payments, "get_order") == Policy.ALLOW
    assert services.effective(payments, "never_listed") == Policy.DENY  # the default
    rule_services.replace_rules(
        rule_services.parse_yaml("rules: [{name: all, kind: '*', then: review}]"), by="t"
    )
    assert (
        services.effective(payments, "get_order") == Policy.ALLOW
    )  # the catch-all is not naming it
    rules = "rules: [{name: orders, kind: mcp.payments.get_order, then: review}]"
    rule_services.replace_rules(rule_services.parse_yaml(rules), by="t")
    assert services.effective(payments, "get_order") == Policy.REVIEW


def test_identical_calls_share_an_action_while_it_is_open(payments, agent):
    arguments = {"order_id": "A1", "amount_cents": 8400}
    first = services.begin(agent.agent, payments, "create_refund", arguments)
    assert first.status == ActionStatus.PENDING
    assert first.kind == "mcp.payments.create_refund"
    assert first.title == "Refund 8400 cents on order A1"
    assert first.editable == ["payload.amount_cents"]
    assert first.payload == arguments
    assert services.begin(agent.agent, payments, "create_refund", dict(arguments)).pk == first.pk
    other = services.begin(agent.agent, payments, "create_refund", {**arguments, "amount_cents": 1})
    assert other.pk != first.pk
    services.delivered(first.pk)
    assert services.begin(agent.agent, payments, "create_refund", arguments).pk != first.pk


def test_a_repeat_after_a_rejection_is_a_new_action_that_names_it(payments, agent, rita):
    from gateway.proxy import _before

    arguments = {"order_id": "R1", "amount_cents": 5000}
    first = services.begin(agent.agent, payments, "create_refund", arguments)
    approvals.decide(
        first.pk, by=rita.user, verdict="reject", note="already refunded", reason="duplicate"
    )
    second = services.begin(agent.agent, payments, "create_refund", arguments)
    assert second.pk != first.pk and second.status == ActionStatus.PENDING
    assert second.context["repeat_of"] == {
        "action_id": first.pk,
        "status": "rejected",
        "note": "already refunded",
        "reject_reason": "duplicate",
    }
    assert "was rejected: already refunded (reason: duplicate)" in _before(second)
    assert GatedCall.objects.get(pk=first.pk).delivered_at is not None
    # The new action is open, so the next identical call attaches to it.
    assert services.begin(agent.agent, payments, "create_refund", arguments).pk == second.pk


def test_an_approved_action_stays_open_until_the_repeat_executes_it(payments, agent, rita):
    arguments = {"order_id": "R2", "amount_cents": 5000}
    first = services.begin(agent.agent, payments, "create_refund", arguments)
    approvals.decide(
        first.pk,
        by=rita.user,
        verdict="approve",
        approves_sha256=approvals.payload_sha256(first.payload),
    )
    again = services.begin(agent.agent, payments, "create_refund", arguments)
    assert again.pk == first.pk and again.status == ActionStatus.APPROVED
    assert "repeat_of" not in again.context


def test_the_upstream_call_is_claimed_once(payments, agent, rita):
    action = services.begin(
        agent.agent, payments, "create_refund", {"order_id": "B", "amount_cents": 10}
    )
    action = approvals.decide(action.pk, by=rita.user, verdict="approve")
    assert services.claim(action) is True
    assert services.claim(action) is False
    assert GatedCall.objects.get(pk=action.pk).upstream_called_at is not None


def test_target_is_detached_from_the_row(payments):
    target = Target.of(payments)
    assert target.url == "https://mcp.example-psp.test/mcp"
    assert target.headers["Authorization"] == "Bearer ${PSP_TOKEN}"


def test_arguments_are_checked_against_the_upstream_schema():
    from approvals.errors import InvalidInput
    from gateway.proxy import check_arguments

    schema = {
        "type": "object",
        "properties": {"order_id": {"type": "string"}, "amount_cents": {"type": "integer"}},
        "required": ["order_id", "amount_cents"],
    }
    check_arguments(schema, {"order_id": "A", "amount_cents": 5})
    with pytest.raises(InvalidInput) as caught:
        check_arguments(schema, {"order_id": "A", "amount_cents": "lots"})
    assert caught.value.field == "arguments.amount_cents"
    with pytest.raises(InvalidInput, match="amount_cents"):
        check_arguments(schema, {"order_id": "A"})


def test_the_inbox_shows_gateway_tool_and_arguments(payments, agent, rita):
    from django.test import Client

    action = services.begin(
        agent.agent, payments, "create_refund", {"order_id": "<b>A1</b>", "amount_cents": 8400}
    )
    browser = Client()
    browser.force_login(rita.user)
    body = browser.get(f"/inbox/actions/{action.pk}").content.decode()
    assert "Refund 8400 cents on order &lt;b&gt;A1&lt;/b&gt;" in body
    assert "payments" in body and "create_refund" in body
    assert "mcp.payments.create_refund" in body
    assert "<b>A1</b>" not in body  # agent text is escaped


@pytest.mark.e2e  # starts stdio upstreams as subprocesses
def test_the_scheduled_refresh_asks_the_upstream_and_records_when_it_is_away(db, tmp_path):
    import sys

    from gateway.tasks import refresh_due

    script = str(Path(__file__).parent.parent / "gateway_upstream.py")
    Upstream.objects.create(
        name="psp",
        command=[sys.executable, script, "--stdio"],
        env={"UPSTREAM_LOG": str(tmp_path / "calls.jsonl")},
    )
    Upstream.objects.create(name="gone", command=[sys.executable, "-c", "raise SystemExit(3)"])
    assert refresh_due() == 1
    psp, gone = Upstream.objects.get(name="psp"), Upstream.objects.get(name="gone")
    assert sorted(t["name"] for t in psp.tools_cache) == [
        "create_refund",
        "delete_customer",
        "get-sum",
        "get_order",
        "settle",
    ]
    assert psp.last_error == "" and psp.tools_refreshed_at is not None
    assert "unreachable" in gone.last_error
    assert services.states() == {
        "gone": {"status": "unreachable", "error": gone.last_error},
        "psp": {"status": "ok"},
    }
    assert refresh_due() == 0  # both were asked just now


def admin_form(**fields) -> dict:
    """The admin's gateway form with one tool policy (create_refund, review), as posted."""
    return {
        "name": "payments",
        "enabled": "on",
        "default_policy": "deny",
        "url": "http://127.0.0.1:9/mcp",
        "headers": "{}",
        "command": "[]",
        "env": "{}",
        "policies-TOTAL_FORMS": "1",
        "policies-INITIAL_FORMS": "0",
        "policies-0-tool": "create_refund",
        "policies-0-policy": "review",
        "policies-0-editable": '["amount_cents"]',
        "policies-0-money": "[]",
        "policies-0-title": "",
        **fields,
    }


def test_admin_edits_gateways_and_refuses_a_written_out_secret(db):
    from django.contrib.auth.models import User
    from django.test import Client

    admin = User.objects.create_superuser("root", password="root-password")
    browser = Client()
    browser.force_login(admin)
    assert browser.get("/admin/gateway/upstream/add/").status_code == 200
    form = admin_form(headers='{"Authorization": "Bearer sk_live_123"}')
    refused = browser.post("/admin/gateway/upstream/add/", form)
    assert refused.status_code == 200
    assert "write the secret as ${VAR}" in refused.content.decode()
    assert not Upstream.objects.exists()
    form["headers"] = '{"Authorization": "Bearer ${PSP_TOKEN}"}'
    assert browser.post("/admin/gateway/upstream/add/", form).status_code == 302
    saved = Upstream.objects.get(name="payments")
    assert saved.headers == {"Authorization": "Bearer ${PSP_TOKEN}"}
    assert ToolPolicy.objects.get(upstream=saved).editable == ["amount_cents"]


def test_an_expired_undelivered_action_is_not_attached_to(payments, agent):
    arguments = {"order_id": "E1", "amount_cents": 100}
    first = services.begin(agent.agent, payments, "create_refund", arguments)
    approvals.cancel_action(first.pk, agent=agent.agent, reason="changed my mind")
    second = services.begin(agent.agent, payments, "create_refund", arguments)
    assert second.pk != first.pk and second.status == ActionStatus.PENDING
    assert services.begin(agent.agent, payments, "create_refund", arguments).pk == second.pk


def test_a_pass_through_is_audited_by_hash_and_redacted_when_the_policy_says(payments, agent):
    from audit.models import AuditEvent

    arguments = {"order_id": "G1", "card": "4242"}
    services.record_pass(agent.agent, "payments", "get_order", arguments, redact=False)
    services.record_pass(agent.agent, "payments", "get_order", arguments, redact=True)
    plain, redacted = AuditEvent.objects.filter(event="gateway.called").order_by("seq")
    assert plain.data["arguments"] == arguments
    assert "arguments" not in redacted.data
    assert redacted.data["arguments_sha256"] == plain.data["arguments_sha256"]
    assert redacted.data["arguments_sha256"] == services.arguments_sha256(arguments)
    assert redacted.actor_id == "support-bot"
