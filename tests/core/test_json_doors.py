"""JSON that reads one way, at every door that takes it (issue 39).

A duplicate key or nesting past the limit is a 4xx naming the key or the limit,
never a 500 and never stored: the REST API, a JSON preview, Web Push
subscriptions, passkey ceremonies, Slack payloads, the inbox socket, rules and
gateway files, the rules admin's test action and ``impri rules test``. The inbox
shows a preview stored before this change as text. MCP's two doors are in
tests/agents/test_mcp_json_doors.py.
"""

from __future__ import annotations

import json
from io import StringIO
from urllib.parse import urlencode

import pytest
import yaml
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.test import Client

from approvals.models import Action, ActionStatus
from gateway import config as gateway_config
from gateway.models import Upstream
from impri.asgi import application
from inbox import render
from plumbing import strict_json, yaml_errors
from rules import engine
from rules import services as rule_services
from rules.models import Rule
from tests.factories import SEED_RULES, make_action, refund_body
from tests.slack_fake import sign
from twofactor.models import PasskeyDevice
from webpush.models import PushSubscription

DEEP = "[" * 10_000 + "]" * 10_000  # Python's json recurses: RecursionError near 1,000
DUPLICATE_KIND = '{"kind": "payment.refund", "kind": "note.add"}'


def nested(levels: int) -> str:
    return "[" * levels + "]" * levels


# --- The reader ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        '{"a": 1, "a": 2}',
        '{"a": 1, "\\u0061": 2}',  # the same key once unescaped
        '[{"x": {"kind": 1, "kind": 1}}]',
    ],
)
def test_a_duplicate_key_is_refused_naming_it(text):
    with pytest.raises(strict_json.DuplicateKey, match='duplicate key "(a|kind)"'):
        strict_json.loads(text)


def test_nesting_is_measured_outside_strings_and_refused_past_the_limit():
    assert strict_json.loads(nested(64)) is not None
    assert strict_json.loads('{"a": "[[[[\\"{{{{"}' + " " * 3) == {"a": '[[[["{{{{'}
    assert strict_json.nesting('["]]]]", [[]]]') == 3
    for text in (nested(65), DEEP, "[" * 10_000, b"[" * 10_000):
        with pytest.raises(strict_json.TooDeep, match="nested deeper than 64 levels"):
            strict_json.loads(text)
    assert strict_json.loads(nested(100), max_depth=128) is not None


def test_text_that_is_not_json_keeps_jsons_own_error():
    for text in ("{", "", b"\xff", '{"a": 1,}', "1" * 5000):
        with pytest.raises(ValueError) as raised:
            strict_json.loads(text)
        assert not isinstance(raised.value, strict_json.Refused)


def test_yaml_refuses_a_duplicate_key_with_its_line_and_keeps_merges():
    text = "rules:\n  - name: a\n    then: review\n    then: auto_approve\n"
    with pytest.raises(yaml.YAMLError) as raised:
        strict_json.load_yaml(text)
    described = yaml_errors.describe(raised.value, text)
    assert described.startswith('line 4, column 5: not YAML: duplicate key "then"'), described
    merged = strict_json.load_yaml("base: &b {x: 1, y: 2}\nthis:\n  <<: *b\n  x: 3\n")
    assert merged["this"] == {"x": 3, "y": 2}


@pytest.mark.parametrize("text", ["[" * 10_000, "- " * 10_000 + "x", "{a: " * 10_000])
def test_yaml_nested_10000_deep_is_refused_without_recursing(text):
    with pytest.raises(yaml.YAMLError, match="nested deeper than 64 levels"):
        strict_json.load_yaml(text)


# --- REST ---------------------------------------------------------------------------------


def body_with(**replace: str) -> str:
    text = json.dumps(refund_body(context={"slot": "S"}))
    for old, new in replace.items():
        text = text.replace(old, new)
    return text


@pytest.mark.parametrize(
    ("text", "key"),
    [
        (
            body_with(**{'"kind": "payment.refund"': '"kind": "payment.refund", "kind": "note"'}),
            "kind",
        ),
        (body_with(**{'"S"': '{"amount_cents": 1, "amount_cents": 900000}'}), "amount_cents"),
        (body_with(**{'"payload": {': '"payload": {"order_id": "x", '}), "order_id"),
    ],
)
def test_a_push_with_a_duplicate_key_is_a_422_naming_it(agent, text, key):
    response = agent.client().post("/actions", text)
    assert response.status_code == 422, response.content
    assert response.json()["field"] == "body"
    assert f'duplicate key "{key}"' in response.json()["detail"]
    assert not Action.objects.exists()


@pytest.mark.parametrize("levels", [257, 10_000])
def test_a_push_nested_past_the_limit_is_a_422(agent, levels):
    response = agent.client().post("/actions", body_with(**{'"S"': nested(levels)}))
    assert response.status_code == 422, response.content
    assert response.json()["detail"] == "body: nested deeper than 256 levels"
    assert not Action.objects.exists()


@pytest.mark.parametrize("levels", [70, 250])
def test_a_field_nested_past_64_is_still_named_by_the_schema(agent, levels):
    response = agent.client().post("/actions", body_with(**{'"S"': nested(levels)}))
    assert response.status_code == 422
    assert response.json()["field"].startswith("context.slot.0.0")
    assert "nested deeper than 64 levels" in response.json()["detail"]


def test_a_decision_body_with_a_duplicate_key_is_refused_and_decides_nothing(agent, rita):
    action = make_action(agent.agent)
    response = rita.client().post(f"/actions/{action.id}/approve", '{"note": "ok", "note": "ok"}')
    assert response.status_code == 422 and '"note"' in response.json()["detail"]
    action.refresh_from_db()
    assert action.status == ActionStatus.PENDING


def test_without_a_key_a_bad_body_is_still_a_401(db):
    response = Client().post("/api/v1/actions", DEEP, content_type="application/json")
    assert response.status_code == 401


# --- A JSON preview -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("preview", "words"),
    [
        ('{"amount": 100, "amount": 900000}', 'duplicate key "amount"'),
        (DEEP, "nested deeper than 64 levels"),
        (nested(65), "nested deeper than 64 levels"),
        ("{not json", "is not JSON"),
    ],
)
def test_a_json_preview_is_read_at_push(agent, preview, words):
    body = refund_body(preview={"format": "json", "body": preview})
    response = agent.client().post("/actions", body)
    assert response.status_code == 422, response.content
    assert response.json()["field"] == "preview.body"
    assert words in response.json()["detail"]
    assert not Action.objects.exists()


def test_a_json_preview_that_reads_one_way_is_stored_and_shown_indented(agent, rita):
    body = refund_body(preview={"format": "json", "body": '{"b": [1, 2], "a": "<x>"}'})
    response = agent.client().post("/actions", body)
    assert response.status_code == 201, response.content
    shown = render.pretty_json(Action.objects.get().preview_body)
    assert shown.replace("&quot;", '"') == (
        '<pre class="json">{\n  "a": "&lt;x&gt;",\n  "b": [\n    1,\n    2\n  ]\n}</pre>'
    )


@pytest.mark.parametrize("stored", [DEEP, "[" * 5000, '{"a": 1, "a": 2}'])
def test_a_preview_stored_before_the_check_is_shown_as_text(agent, rita, stored):
    action = make_action(agent.agent, preview={"format": "json", "body": "{}"})
    Action.objects.filter(pk=action.pk).update(preview_body=stored)
    assert render.pretty_json(stored) == f'<pre class="json">{render.reveal(stored)}</pre>'
    client = Client()
    client.force_login(rita.user)
    page = client.get(f"/inbox/actions/{action.id}")
    assert page.status_code == 200
    assert stored[:50] in page.content.decode().replace("&quot;", '"')


# --- Web Push, passkeys, Slack, the inbox socket ------------------------------------------


def signed_in(persona, csrf: bool = False) -> Client:
    client = Client(enforce_csrf_checks=csrf)
    client.force_login(persona.user)
    return client


SUBSCRIPTION = {
    "endpoint": "https://push.example.com/send/abc",
    "keys": {"p256dh": "BNcRd", "auth": "tBHI"},
}


@pytest.mark.parametrize(
    ("text", "words"),
    [
        (json.dumps(SUBSCRIPTION)[:-1] + ', "endpoint": "https://evil.example/x"}', '"endpoint"'),
        (DEEP, "nested deeper than 64 levels"),
    ],
)
def test_a_push_subscription_that_reads_two_ways_is_a_422(rita, text, words):
    response = signed_in(rita).post("/inbox/push/subscriptions", text, "application/json")
    assert response.status_code == 422, response.content
    assert words in response.json()["error"]
    assert not PushSubscription.objects.exists()


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ('{"credential": {"id": "AAAA"}, "credential": {}}', "duplicate key"),
        (DEEP, "nested deeper than 64 levels"),
    ],
)
def test_a_passkey_ceremony_that_reads_two_ways_is_refused(rita, text, words):
    client = signed_in(rita)
    assert client.post("/accounts/2fa/passkeys/register/options").status_code == 200
    answer = client.post("/accounts/2fa/passkeys/register", text, "application/json")
    assert answer.status_code == 400 and words in answer.json()["error"]
    assert not PasskeyDevice.objects.exists()
    assert client.post("/accounts/2fa/passkeys/auth", text, "application/json").status_code < 500


SLACK_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"


@pytest.mark.parametrize(
    ("payload", "words"),
    [('{"type": "view_closed", "type": "block_actions"}', '"type"'), (DEEP, "deeper than 64")],
)
def test_a_slack_payload_that_reads_two_ways_is_a_422(db, settings, payload, words):
    settings.IMPRI_SLACK_SIGNING_SECRET = SLACK_SECRET
    body = urlencode({"payload": payload})
    response = Client().post(
        "/integrations/slack/interactivity",
        body,
        content_type="application/x-www-form-urlencoded",
        headers=sign(SLACK_SECRET, body),
    )
    assert response.status_code == 422, response.content
    assert words in response.json()["detail"]


def test_a_slack_edit_value_that_reads_two_ways_is_refused():
    from slackapp.views import typed

    assert typed({"a": 1}, '{"a": 2}') == {"a": 2}
    for raw, words in (('{"a": 1, "a": 2}', 'duplicate key "a"'), (DEEP, "deeper than 64")):
        with pytest.raises(ValueError, match=words):
            typed({"a": 1}, raw)


@pytest.mark.django_db(transaction=True)
async def test_the_inbox_socket_ignores_a_frame_that_reads_two_ways(rita):
    client = Client()
    await sync_to_async(client.force_login)(rita.user)
    cookie = client.cookies["sessionid"].value
    headers = [(b"origin", b"http://localhost"), (b"host", b"localhost")]
    socket = WebsocketCommunicator(
        application, "/ws/inbox", headers=[*headers, (b"cookie", f"sessionid={cookie}".encode())]
    )
    assert (await socket.connect(timeout=5))[0]
    assert (await socket.receive_json_from(timeout=5))["event"] == "hello"
    await socket.send_to(text_data='{"event": "watch", "event": "ping"}')
    await socket.send_to(text_data=nested(300))
    assert await socket.receive_nothing(timeout=0.3)
    await socket.send_json_to({"event": "ping"})  # still open, still answering
    assert await socket.receive_json_from(timeout=5) == {"event": "pong"}
    await socket.disconnect()


# --- Rules and gateway files, the rules admin, the CLI --------------------------------------


DUPLICATE_RULE = "rules:\n  - name: small\n    then: review\n    then: auto_approve\n"


@pytest.mark.parametrize("text", [DUPLICATE_RULE, "rules: " + "[" * 10_000])
def test_a_rules_file_that_reads_two_ways_is_refused_and_nothing_imported(db, tmp_path, text):
    path = tmp_path / "rules.yaml"
    path.write_text(text)
    with pytest.raises(CommandError) as raised:
        call_command("rules", "import", str(path), stdout=StringIO())
    first = str(raised.value).splitlines()[0]
    assert 'duplicate key "then"' in first or "nested deeper than 64 levels" in first
    assert first.startswith(f"{path}: line ")
    assert not Rule.objects.exists()


def test_a_gateway_file_with_a_duplicate_key_is_refused(db):
    text = (
        "gateways:\n  - name: pay\n    url: https://a.example/mcp\n    url: https://b.example/mcp\n"
    )
    with pytest.raises(gateway_config.ConfigError, match='line 4, column 5: .*duplicate key "url"'):
        gateway_config.parse_yaml(text)
    with pytest.raises(gateway_config.ConfigError, match="nested deeper than 64"):
        gateway_config.parse_yaml("gateways: " + "[" * 10_000)
    assert not Upstream.objects.exists()


@pytest.fixture
def ops(db) -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("ops", "ops@example.com", "ops-password"))
    return client


@pytest.mark.parametrize(("text", "words"), [(DUPLICATE_KIND, '"kind"'), (DEEP, "deeper than 64")])
def test_the_rules_admins_test_action_that_reads_two_ways_is_a_form_error(ops, text, words):
    response = ops.post(
        "/admin/rules/rule/dry-run/",
        {"rules_yaml": SEED_RULES, "action_json": text, "since": "30d"},
    )
    assert response.status_code == 200
    assert words in response.content.decode().replace("&quot;", '"')
    assert "verdict" not in response.content.decode()


def test_the_rules_admins_rule_definition_refuses_a_duplicate_key(ops):
    response = ops.post(
        "/admin/rules/rule/add/",
        {
            "position": 0,
            "name": "r",
            "enabled": "on",
            "definition": "then: review\nthen: auto_approve\n",
        },
    )
    assert response.status_code == 200
    assert "duplicate key" in response.content.decode()
    assert not Rule.objects.exists()


@pytest.mark.parametrize(
    ("text", "words"), [(DUPLICATE_KIND, 'duplicate key "kind"'), (DEEP, "deeper than 64")]
)
def test_impri_rules_test_names_the_duplicate_key_in_one_line(db, tmp_path, text, words):
    rules = tmp_path / "rules.yaml"
    rules.write_text(SEED_RULES)
    action = tmp_path / "action.json"
    action.write_text(text)
    with pytest.raises(CommandError) as raised:
        call_command("rules", "test", str(rules), "--action", str(action), stdout=StringIO())
    assert "\n" not in str(raised.value) and words in str(raised.value)


def test_rule_files_still_parse(db):
    parsed = rule_services.parse_file(SEED_RULES)
    assert parsed.rules and all(isinstance(rule, engine.Rule) for rule in parsed.rules)


# --- MCP's reading (its doors end to end: tests/agents/test_mcp_json_doors.py) --------------


@pytest.mark.parametrize(
    ("text", "found_id"),
    [
        ('{"jsonrpc": "2.0", "params": {"id": 1, "x": ' + DEEP + '}, "id": "call-9"}', "call-9"),
        ('{"id": 4, "method": "x", "method": "y"}', 4),
        ('{"id": 4, "id": 5, "a": 1, "a": 1}', None),  # which id? neither
        ('{"id": x' + "[" * 200, None),  # refused unparsed: the id itself isn't JSON
        ('{"id": ' + "1" * 5000 + ", " + "[" * 200, None),
        ("[" + DEEP + "]", None),
    ],
)
def test_mcp_refuses_with_the_requests_own_id_when_it_has_one(text, found_id):
    from agent_doors.mcp.jsonrpc import json_rpc_refusal

    refusal = json_rpc_refusal(text)
    assert refusal["id"] == found_id and refusal["error"]["code"] == -32700


def test_mcp_leaves_text_that_is_not_json_to_the_sdk():
    from agent_doors.mcp.jsonrpc import json_rpc_refusal

    assert json_rpc_refusal('{"id": 1, "method": "tools/list"}') is None
    assert json_rpc_refusal("{") is None
