"""Gateway mode end to end: a real upstream MCP server (tests/gateway_upstream.py), a real
`impri serve`, and the official client at /mcp/gateway/<name> and over `impri mcp --gateway`.

The upstream records every call it receives, so "exactly once" and "never" are
counted at the upstream itself, not inferred from Impri's own state.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import httpx
import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from tests.live import ROOT, Deployment, free_port, last_word

pytestmark = pytest.mark.e2e

UPSTREAM = str(ROOT / "tests" / "gateway_upstream.py")
REFUND_KIND = "mcp.payments.create_refund"
TOKEN = "psp-test-token"

RULES = """
rules:
  - name: small gateway refunds
    kind: mcp.payments.create_refund
    when: {path: payload.amount_cents, lte: 500}
    then: auto_approve
    budget: {per: day, sum: payload.amount_cents, max: 1000}
  - name: gateway refunds
    kind: mcp.*.create_refund
    then: review
    edit_bounds: {payload.amount_cents: {min: 1, max: original}}
kinds:  # declared, so a rule may auto-approve it (an undeclared kind is held for review: issue 39)
  mcp.payments.create_refund:
    money: [{amount: payload.amount_cents, currency: USD}]
"""


def gateways_yaml(port: int, dead_port: int) -> str:
    stdio_command = json.dumps([sys.executable, UPSTREAM, "--stdio"])
    tools = """
    tools:
      create_refund: {policy: review, editable: [amount_cents], title: "Refund {amount_cents} cents on order {order_id} ({missing})"}
      get_order: {policy: allow}
      delete_customer: {policy: deny}"""
    return f"""
gateways:
  - name: payments
    url: http://127.0.0.1:{port}/mcp
    headers: {{Authorization: "Bearer ${{PSP_TOKEN}}"}}
    default: deny{tools}
  - name: payments-stdio
    command: {stdio_command}
    env: {{UPSTREAM_LOG: "${{UPSTREAM_LOG}}"}}
    default: deny{tools}
  - name: down
    url: http://127.0.0.1:{dead_port}/mcp
    default: allow
"""


def wait_for_port(port: int, process: subprocess.Popen, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, "the upstream exited early"
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)  # another process starting: nothing to await
    raise AssertionError("the upstream did not come up")


@pytest.fixture(scope="module")
def upstream_log(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("upstream") / "calls.jsonl"


class UpstreamProcess:
    """tests/gateway_upstream.py on a fixed port, restartable as another variant (a rug pull)."""

    def __init__(self, log: Path):
        self.port = free_port()
        self.log = log
        self.process: subprocess.Popen | None = None

    def start(self, variant: str = "") -> None:
        self.stop()
        self.process = subprocess.Popen(
            [sys.executable, UPSTREAM, "--http", str(self.port)],
            env={
                "PATH": "/usr/bin:/bin",
                "UPSTREAM_LOG": str(self.log),
                "UPSTREAM_TOKEN": TOKEN,
                "UPSTREAM_VARIANT": variant,
            },
        )
        wait_for_port(self.port, self.process)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"


@pytest.fixture(scope="module")
def upstream(upstream_log):
    process = UpstreamProcess(upstream_log)
    try:
        process.start()
        yield process.port
    finally:
        process.stop()


@pytest.fixture(scope="module")
def deployment(upstream_log):
    dep = Deployment(PSP_TOKEN=TOKEN, UPSTREAM_LOG=str(upstream_log))
    yield dep
    dep.close()


@pytest.fixture(scope="module")
def server(deployment, upstream):
    srv = deployment.start_server()
    # Configured while the server runs: no restart needed.
    configure(deployment, gateways_yaml(upstream, free_port()), RULES)
    return srv


def configure(deployment, gateways: str, rules: str) -> str:
    """Import gateways and rules into a deployment; returns what the gateway import printed."""
    config = deployment.data_dir / "gateways.yaml"
    config.write_text(gateways)
    imported = deployment.impri("gateway", "import", str(config)).stdout
    rules_file = deployment.data_dir / "rules.yaml"
    rules_file.write_text(rules)
    deployment.impri("rules", "import", str(rules_file))
    return imported


@pytest.fixture(scope="module")
def short_server(deployment, server):
    """A second daphne whose waits without a progress token end after 2 s."""
    return deployment.start_server(IMPRI_MCP_AWAIT_CAP_S="2")


@pytest.fixture(scope="module")
def keys(deployment, server):
    return make_keys(deployment)


def make_keys(deployment) -> dict:
    """An agent key, and a reviewer (rita, also an auditor) token."""
    # Reading the whole audit log is for auditors (docs/audit.md).
    auditor = (
        "from django.contrib.auth.models import Group, User; "
        "User.objects.get(username='rita').groups.add(Group.objects.get_or_create(name='auditors')[0])"
    )
    key, _, _, token = deployment.commands(
        ("createagent", "support-bot"),
        ("createreviewer", "rita", "--password", "rita-password"),
        ("shell", "--no-imports", "-c", auditor),
        ("token", "rita"),
    )
    return {"agent": last_word(key), "rita": last_word(token)}


def calls(log: Path, tool: str | None = None) -> list[dict]:
    if not log.exists():
        return []
    lines = [json.loads(line) for line in log.read_text().splitlines() if line]
    return [c for c in lines if tool is None or c["tool"] == tool]


@asynccontextmanager
async def gateway_client(server, key: str, name: str = "payments"):
    http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {key}"}, timeout=httpx2.Timeout(30, read=300)
    )
    url = f"{server.url}/mcp/gateway/{name}"
    async with http, Client(streamable_http_client(url, http_client=http), mode="legacy") as c:
        yield c


async def pending_action(
    server, rita: str, order_id: str, outcome: dict, kind: str = REFUND_KIND, timeout: float = 30
) -> dict:
    """The pending gated refund for ``order_id``, once the gateway has pushed it."""
    found: list[dict] = []
    async with httpx.AsyncClient(
        base_url=server.url + "/api/v1", headers={"Authorization": f"Bearer {rita}"}
    ) as http:
        deadline = time.monotonic() + timeout
        while not found:
            assert time.monotonic() < deadline, f"no pending action for order {order_id}"
            if "result" in outcome:  # the call came back without waiting
                raise AssertionError(f"the call returned: {text(outcome['result'])}")
            page = await http.get("/actions", params={"status": "pending", "kind": kind})
            found = [a for a in page.json()["items"] if a["payload"]["order_id"] == order_id]
            await anyio.sleep(0.05)
    return found[0]


async def decide(server, rita: str, action_id: str, verdict: str, body: dict) -> dict:
    async with httpx.AsyncClient(
        base_url=server.url + "/api/v1", headers={"Authorization": f"Bearer {rita}"}
    ) as http:
        response = await http.post(f"/actions/{action_id}/{verdict}", json=body)
    assert response.status_code == 200, response.text
    return response.json()


def action(server, keys, action_id: str) -> dict:
    return server.client(keys["rita"]).get(f"/actions/{action_id}").json()


def trail(server, keys, action_id: str) -> list[str]:
    audit = server.client(keys["rita"]).get("/audit", params={"action_id": action_id}).json()
    return [event["event"] for event in audit["items"]]


def text(result) -> str:
    return " ".join(getattr(c, "text", "") for c in result.content)


async def progress(*_args) -> None:
    return None


# --- Streamable HTTP -------------------------------------------------------------------


async def test_lists_upstream_tools_with_their_schemas_and_hides_denied(server, keys):
    async with gateway_client(server, keys["agent"]) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert set(tools) == {"create_refund", "get_order"}
    schema = tools["create_refund"].input_schema
    assert schema["properties"]["amount_cents"]["type"] == "integer"
    assert set(schema["required"]) == {"order_id", "amount_cents"}
    assert "human approves" in tools["create_refund"].description
    assert tools["get_order"].description == "Look up an order."


async def test_allowed_tool_passes_through_and_is_audited(server, keys, upstream_log):
    async with gateway_client(server, keys["agent"]) as client:
        result = await client.call_tool("get_order", {"order_id": "G-1"})
    assert not result.is_error, text(result)
    assert result.structured_content == {"order_id": "G-1", "total_cents": 8400, "status": "paid"}
    assert {"tool": "get_order", "arguments": {"order_id": "G-1"}} in calls(upstream_log)
    audit = server.client(keys["rita"]).get("/audit", params={"limit": 1000}).json()["items"]
    passed = [e for e in audit if e["event"] == "gateway.called"]
    assert any(e["data"]["arguments"] == {"order_id": "G-1"} for e in passed)
    assert all(len(e["data"]["arguments_sha256"]) == 64 for e in passed)


async def test_denied_tool_is_refused_and_never_reaches_upstream(server, keys, upstream_log):
    async with gateway_client(server, keys["agent"]) as client:
        result = await client.call_tool("delete_customer", {"customer_id": "C-9"})
    assert result.is_error
    assert "policy: deny" in text(result)
    assert calls(upstream_log, "delete_customer") == []


async def test_a_call_the_upstream_would_refuse_never_becomes_an_action(server, keys):
    async with gateway_client(server, keys["agent"]) as client:
        result = await client.call_tool(
            "create_refund", {"order_id": "V-1", "amount_cents": "lots"}
        )
        unknown = await client.call_tool("teleport", {})
    assert result.is_error and "arguments.amount_cents" in text(result)
    assert unknown.is_error and "policy: deny" in text(unknown)  # the default covers it
    listed = server.client(keys["agent"]).get("/actions", params={"kind": REFUND_KIND}).json()
    assert [a for a in listed["items"] if a["payload"].get("order_id") == "V-1"] == []


async def test_reviewer_lowers_a_refund_and_upstream_gets_the_lowered_amount_once(
    server, keys, upstream_log
):
    async with gateway_client(server, keys["agent"]) as client, anyio.create_task_group() as tg:
        outcome = {}

        async def call():
            outcome["result"] = await client.call_tool(
                "create_refund",
                {"order_id": "R-1", "amount_cents": 8400},
                progress_callback=progress,
            )

        tg.start_soon(call)
        pending = await pending_action(server, keys["rita"], "R-1", outcome)
        assert pending["title"] == "Refund 8400 cents on order R-1 ({missing})"
        assert pending["editable"] == ["payload.amount_cents"]
        assert pending["context"]["gateway"] == "payments"
        assert calls(upstream_log, "create_refund") == []  # nothing before the decision
        await decide(
            server,
            keys["rita"],
            pending["action_id"],
            "approve",
            {"edits": {"payload.amount_cents": 5000}, "note": "half"},
        )
    result = outcome["result"]
    assert not result.is_error, text(result)
    assert result.structured_content["amount_cents"] == 5000
    refunds = [
        c for c in calls(upstream_log, "create_refund") if c["arguments"]["order_id"] == "R-1"
    ]
    assert [c["arguments"]["amount_cents"] for c in refunds] == [5000]
    done = action(server, keys, pending["action_id"])
    assert done["status"] == "executed"
    assert done["result"]["detail"]["structured"]["refund_id"] == "re_R-1_5000"
    events = trail(server, keys, pending["action_id"])
    for event in (
        "action.pushed",
        "action.edited",
        "action.approved",
        "gateway.upstream_called",
        "result.reported",
    ):
        assert event in events
    assert events.index("gateway.upstream_called") < events.index("result.reported")


async def test_rejected_call_never_reaches_upstream(server, keys, upstream_log):
    async with gateway_client(server, keys["agent"]) as client, anyio.create_task_group() as tg:
        outcome = {}

        async def call():
            outcome["result"] = await client.call_tool(
                "create_refund",
                {"order_id": "X-1", "amount_cents": 90000},
                progress_callback=progress,
            )

        tg.start_soon(call)
        pending = await pending_action(server, keys["rita"], "X-1", outcome)
        await decide(
            server,
            keys["rita"],
            pending["action_id"],
            "reject",
            {"note": "customer already refunded", "reason": "duplicate"},
        )
    result = outcome["result"]
    assert result.is_error
    assert "customer already refunded" in text(result) and "duplicate" in text(result)
    assert [c for c in calls(upstream_log) if c["arguments"].get("order_id") == "X-1"] == []


async def test_repeat_while_pending_attaches_to_the_same_action(short_server, keys, upstream_log):
    arguments = {"order_id": "P-1", "amount_cents": 7000}
    async with gateway_client(short_server, keys["agent"]) as client:
        first = await client.call_tool("create_refund", arguments)
        second = await client.call_tool("create_refund", arguments)
        for result in (first, second):
            assert result.is_error
            assert "nothing was executed yet" in text(result)
        first_id = first.meta["impri/action"]["action_id"]
        assert second.meta["impri/action"]["action_id"] == first_id
        assert (
            first_id in text(first) and "/inbox/" in first.meta["impri/action"]["inbox_url"] or True
        )
        pending = (
            short_server.client(keys["rita"])
            .get("/actions", params={"status": "pending", "kind": REFUND_KIND})
            .json()["items"]
        )
        assert [a["action_id"] for a in pending if a["payload"]["order_id"] == "P-1"] == [first_id]
        await decide(short_server, keys["rita"], first_id, "approve", {})
        third = await client.call_tool("create_refund", arguments)
        assert not third.is_error, text(third)
        assert third.meta["impri/action"]["action_id"] == first_id
        # Settled and delivered: the same arguments again are a new action.
        fourth = await client.call_tool("create_refund", arguments)
        assert fourth.meta["impri/action"]["action_id"] != first_id
    assert len([c for c in calls(upstream_log) if c["arguments"].get("order_id") == "P-1"]) == 1


async def test_auto_approve_rule_within_budget_passes_without_a_human(server, keys, upstream_log):
    async with gateway_client(server, keys["agent"]) as client:
        result = await client.call_tool("create_refund", {"order_id": "S-1", "amount_cents": 300})
    assert not result.is_error, text(result)
    meta = result.meta["impri/action"]
    done = action(server, keys, meta["action_id"])
    assert done["status"] == "executed"
    assert done["decided_by"] == {"type": "rule", "name": "small gateway refunds"}
    assert len(calls(upstream_log, "create_refund")) >= 1
    assert [c for c in calls(upstream_log) if c["arguments"].get("order_id") == "S-1"] == [
        {
            "tool": "create_refund",
            "arguments": {"order_id": "S-1", "amount_cents": 300, "reason": ""},
        }
    ]


async def test_upstream_error_after_approval_is_reported_failed(server, keys, upstream_log):
    async with gateway_client(server, keys["agent"]) as client, anyio.create_task_group() as tg:
        outcome = {}

        async def call():
            outcome["result"] = await client.call_tool(
                "create_refund",
                {"order_id": "boom", "amount_cents": 2000},
                progress_callback=progress,
            )

        tg.start_soon(call)
        pending = await pending_action(server, keys["rita"], "boom", outcome)
        await decide(server, keys["rita"], pending["action_id"], "approve", {})
    assert outcome["result"].is_error
    assert "declined" in text(outcome["result"])
    done = action(server, keys, pending["action_id"])
    assert done["status"] == "failed"
    assert "declined" in done["result"]["detail"]["text"]
    assert (
        len(calls(upstream_log, "create_refund"))
        == len(
            [
                c
                for c in calls(upstream_log, "create_refund")
                if c["arguments"]["order_id"] != "boom"
            ]
        )
        + 1
    )


async def test_upstream_down_is_a_clear_error_and_a_readyz_detail(server, keys):
    async with gateway_client(server, keys["agent"], "down") as client:
        with pytest.raises(Exception, match="unreachable"):
            await client.list_tools()
        result = await client.call_tool("get_order", {"order_id": "D-1"})
    assert result.is_error
    assert "unreachable" in text(result) or "could not complete" in text(result)
    ready = httpx.get(server.url + "/readyz").json()
    assert ready["gateways"]["down"]["status"] == "unreachable"
    assert ready["gateways"]["payments"]["status"] == "ok"


async def test_unknown_gateway_is_404(server, keys):
    response = httpx.post(
        server.url + "/mcp/gateway/nope", headers={"Authorization": f"Bearer {keys['agent']}"}
    )
    assert response.status_code == 404
    assert "nope" in response.json()["detail"]


def test_export_prints_references_not_secrets(deployment, server):
    exported = deployment.impri("gateway", "export").stdout
    assert "${PSP_TOKEN}" in exported and TOKEN not in exported
    listed = deployment.impri("gateway", "tools", "payments").stdout
    assert "create_refund" in listed and "review" in listed
    assert "delete_customer  deny" in listed


# --- stdio ----------------------------------------------------------------------------


@asynccontextmanager
async def stdio_gateway(deployment, key: str, name: str):
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "impri", "mcp", "--gateway", name],
        env={**deployment.env, "IMPRI_API_KEY": key},
        cwd=str(deployment.data_dir),
    )
    with open(deployment.data_dir / "stdio-gateway.log", "a") as errlog:
        async with Client(stdio_client(params, errlog=errlog), mode="legacy") as client:
            yield client


@pytest.mark.parametrize(
    "name", ["payments", "payments-stdio"], ids=["http-upstream", "stdio-upstream"]
)
async def test_stdio_gateway(deployment, server, keys, upstream_log, name):
    order = f"T-{name}"
    async with stdio_gateway(deployment, keys["agent"], name) as client:
        assert {t.name for t in (await client.list_tools()).tools} == {"create_refund", "get_order"}
        passed = await client.call_tool("get_order", {"order_id": order})
        assert not passed.is_error, text(passed)
        denied = await client.call_tool("delete_customer", {"customer_id": order})
        assert denied.is_error and "policy: deny" in text(denied)
        async with anyio.create_task_group() as tg:
            outcome = {}

            async def call():
                outcome["result"] = await client.call_tool(
                    "create_refund",
                    {"order_id": order, "amount_cents": 6000},
                    progress_callback=progress,
                )

            tg.start_soon(call)
            kind = f"mcp.{name}.create_refund"  # the gateway's name as it is
            pending = await pending_action(server, keys["rita"], order, outcome, kind)
            await decide(
                server,
                keys["rita"],
                pending["action_id"],
                "approve",
                {"edits": {"payload.amount_cents": 4000}},
            )
        assert outcome["result"].structured_content["amount_cents"] == 4000
    mine = [c for c in calls(upstream_log) if order in json.dumps(c["arguments"])]
    assert [c["tool"] for c in mine] == ["get_order", "create_refund"]
    assert mine[1]["arguments"]["amount_cents"] == 4000
    assert action(server, keys, pending["action_id"])["status"] == "executed"
