"""A corpus of hostile input against a real `impri serve`: never a 500, nothing unrenderable.

Every case goes over the wire as raw bytes (so lone surrogates, NaN and 400-digit
numbers arrive exactly as an attacker writes them) through REST, through MCP
with raw JSON-RPC, and through the official MCP client where it can encode the
case. Then a superuser opens everything that was stored in the inbox and the
admin: each page answers a 4xx or a page that renders, never a 500. Runs on
both legs (SQLite, and PostgreSQL + Redis).
"""

from __future__ import annotations

import json
import re
import sqlite3

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.factories import refund_body
from tests.live import Deployment

pytestmark = pytest.mark.e2e

SUPERUSER_PASSWORD = "corpus-root-password-9f2"


def _deep(levels: int, leaf: str = "1") -> str:
    return '{"a":' * levels + leaf + "}" * levels


def _body(**overrides) -> str:
    return json.dumps(refund_body(**overrides), ensure_ascii=True)


def _raw(body: str, old: str, new: str) -> str:
    assert old in body, old
    return body.replace(old, new, 1)


BASE = _body(context={"slot": "S"}, payload={"amount_cents": 8400, "currency": "USD", "slot": "P"})
# Each case: the raw JSON text of a push (what a hostile agent writes, byte for byte).
PUSH_CASES: dict[str, str] = {
    "payload nested 65 deep": _raw(BASE, '"P"', _deep(65)),
    "payload nested 300 deep": _raw(BASE, '"P"', _deep(300)),
    "context nested 980 deep": _raw(BASE, '"S"', _deep(980)),
    "payload nested 5000 deep": _raw(BASE, '"P"', _deep(5000)),
    "lone surrogate in a context key": _raw(BASE, '"slot": "S"', '"\\ud83d": "x"'),
    "lone surrogate in a payload value": _raw(BASE, '"P"', '"\\udc00"'),
    "lone surrogate in the title": _raw(BASE, '"Refund', '"\\ud800Refund'),
    "lone surrogate in the preview": _raw(BASE, '"Customer', '"\\udfffCustomer'),
    "NaN in payload": _raw(BASE, '"P"', "NaN"),
    "Infinity in context": _raw(BASE, '"S"', "Infinity"),
    "-Infinity in payload": _raw(BASE, '"P"', "-Infinity"),
    "1e400 in payload": _raw(BASE, '"P"', "1e400"),
    "400-digit integer in context": _raw(BASE, '"S"', "9" * 400),
    "5000-digit integer in payload": _raw(BASE, '"P"', "9" * 5000),
    "10**21 in the amount": _raw(BASE, "8400", str(10**21)),
    "NUL in title": _raw(BASE, '"Refund', '"\\u0000Refund'),
    "NUL in a context key": _raw(BASE, '"slot"', '"a\\u0000b"'),
    "NUL in the idempotency key": _raw(BASE, '"kind"', '"idempotency_key": "k\\u0000", "kind"'),
    "NUL in target_url": _raw(BASE, "https://shop", "https://sh\\u0000op"),
    "not JSON": "{kind: payment.refund",
    "a JSON array": "[1, 2, 3]",
    "an empty body": "",
    # Stored on purpose: they must render safely.
    "bidi override and zero-width in the title": _raw(BASE, '"Refund', '"\\u202e\\u200bRefund'),
    "bidi and tag characters in context": _raw(
        BASE, '"S"', '"\\u2066\\u202e\\udb40\\udc41hidden\\u2069 \\u200d\\ufeff"'
    ),
    "emoji pair and combining marks": _raw(BASE, '"S"', '"\\ud83d\\ude00 Z\\u0351\\u0334a\\u0310"'),
    "64 levels exactly": _raw(BASE, '"P"', _deep(63)),
    "largest safe integer": _raw(BASE, '"P"', str(2**53 - 1)),
    # A payload is I-JSON (issue 28): beyond 2^53 - 1 no JCS library hashes it alike.
    "2**63 in the amount": _raw(BASE, "8400", str(2**63)),
    "2**53 + 1 in the payload": _raw(BASE, '"P"', str(2**53 + 1)),
    # Context keeps exact numbers and hashes them exactly (issue 11).
    "1e20 in context": _raw(BASE, '"S"', "1e20"),
    "script in the markdown preview": _raw(
        BASE, '"Customer', '"<script>alert(1)</script>[x](javascript:alert(1)) Customer'
    ),
}
STORED_CASES = {
    "bidi override and zero-width in the title",
    "bidi and tag characters in context",
    "emoji pair and combining marks",
    "64 levels exactly",
    "largest safe integer",
    "1e20 in context",
    "script in the markdown preview",
}


@pytest.fixture(scope="module")
def deployment():
    deployment = Deployment()
    yield deployment
    deployment.close()


@pytest.fixture(scope="module")
def server(deployment):
    return deployment.start_server()


@pytest.fixture(scope="module")
def keys(deployment, server):
    agent = deployment.last_word("createagent", "corpus-bot")
    deployment.impri(
        "createsuperuser",
        "--noinput",
        "--username",
        "root",
        "--email",
        "root@example.com",
        DJANGO_SUPERUSER_PASSWORD=SUPERUSER_PASSWORD,
    )
    # The superuser joins the reviewers: createreviewer changes an existing user only when
    # told to reset the password (here to the one it has).
    deployment.impri(
        "createreviewer",
        "root",
        "--group",
        "reviewers",
        "--reset-password",
        IMPRI_REVIEWER_PASSWORD=SUPERUSER_PASSWORD,
    )
    return {"agent": agent, "root": deployment.last_word("token", "root")}


@pytest.fixture(scope="module")
def browser(server, keys):
    """A logged-in superuser session (sees every action in the inbox and the admin)."""
    with httpx.Client(base_url=server.url, timeout=30) as http:
        http.get("/accounts/login/")
        response = http.post(
            "/accounts/login/",
            data={
                "username": "root",
                "password": SUPERUSER_PASSWORD,
                "csrfmiddlewaretoken": http.cookies["csrftoken"],
            },
        )
        assert response.status_code == 302, response.text[:500]
        yield http


def _assert_not_a_server_error(response, what: str) -> None:
    assert response.status_code < 500, f"{what}: {response.status_code} {response.text[:300]}"


def _assert_json_refusal(response, what: str) -> None:
    _assert_not_a_server_error(response, what)
    assert response.headers["content-type"].startswith("application/json"), what
    body = response.json()
    assert body["detail"] and "Traceback" not in body["detail"], what


def _post_raw(server, key: str, path: str, text: str) -> httpx.Response:
    return httpx.post(
        server.url + "/api/v1" + path,
        content=text.encode("utf-8"),
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
        timeout=30,
    )


def _mcp_raw(server, key: str, tool: str, arguments_json: str) -> tuple[int, str]:
    """One tools/call as raw JSON-RPC text (no client could re-encode what it carries)."""
    text = (
        '{"jsonrpc": "2.0", "id": 7, "method": "tools/call", '
        f'"params": {{"name": "{tool}", "arguments": {arguments_json}}}}}'
    )
    response = httpx.post(
        server.url + "/mcp",
        content=text.encode("utf-8"),
        headers={
            "Authorization": f"Bearer {key}",
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "Mcp-Protocol-Version": "2025-06-18",
        },
        timeout=30,
    )
    return response.status_code, response.text


def _mcp_outcome(status: int, text: str, what: str) -> dict | None:
    """The JSON-RPC answer of a raw MCP call; a 4xx refusal gives None."""
    assert status < 500, f"{what}: MCP answered {status}: {text[:300]}"
    if status >= 400:
        return None
    data = [line[5:].strip() for line in text.splitlines() if line.startswith("data:")]
    message = json.loads(data[-1] if data else text)
    assert "Traceback" not in text, what
    error = message.get("error")
    assert error is None or error.get("code") != -32603, f"{what}: internal error {error}"
    return message


@pytest.mark.parametrize("case", list(PUSH_CASES))
def test_hostile_push_over_rest_is_refused_or_stored_safely(server, keys, case, stored):
    response = _post_raw(server, keys["agent"], "/actions", PUSH_CASES[case])
    if case in STORED_CASES:
        assert response.status_code == 201, response.text[:300]
        stored.append(response.json()["action_id"])
        return
    _assert_json_refusal(response, case)
    assert response.status_code in (400, 422), (case, response.text[:300])
    if response.status_code == 422:
        assert response.json()["field"], case


@pytest.mark.parametrize("case", list(PUSH_CASES))
def test_hostile_push_over_mcp_json_rpc_is_a_tool_error_or_refusal(server, keys, case, stored):
    arguments = PUSH_CASES[case] or "null"
    status, text = _mcp_raw(server, keys["agent"], "impri_push_action", arguments)
    message = _mcp_outcome(status, text, case)
    if message is None or "error" in message:
        assert case not in STORED_CASES, (case, text[:300])
        return
    result = message["result"]
    if case in STORED_CASES:
        assert not result.get("isError"), (case, result)
        stored.append(result["structuredContent"]["action_id"])
    else:
        assert result.get("isError"), (case, result)
        assert "Traceback" not in result["content"][0]["text"]


# What the official client can encode at all (it refuses lone surrogates itself
# and turns NaN into null): the same refusals come back as tool errors.
CLIENT_CASES = {
    "payload nested 65 deep": refund_body(payload={"amount_cents": 1, "a": json.loads(_deep(65))}),
    "NUL in a payload value": refund_body(payload={"amount_cents": 1, "note": "a\x00b"}),
    "NUL in a context key": refund_body(context={"a\x00b": 1}),
    "10**21 in the amount": refund_body(payload={"amount_cents": 10**21}),
    "huge integer in context": refund_body(context={"n": 10**300}),
}


@pytest.mark.parametrize("case", list(CLIENT_CASES))
async def test_hostile_push_through_the_official_mcp_client_is_a_tool_error(server, keys, case):
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {keys['agent']}"}, timeout=30)
    async with http, Client(streamable_http_client(server.url + "/mcp", http_client=http)) as c:
        result = await c.call_tool("impri_push_action", CLIENT_CASES[case])
    assert result.is_error, (case, result)
    text = result.content[0].text
    assert "Traceback" not in text and "internal" not in text.lower(), text
    assert re.search(r"\b(payload|context)[.:]", text), text


@pytest.fixture(scope="module")
def stored() -> list[str]:
    return []


@pytest.fixture(scope="module")
def approved(server, keys) -> str:
    """An approved action, to report hostile results on."""
    response = _post_raw(server, keys["agent"], "/actions", _body())
    action_id = response.json()["action_id"]
    decided = _post_raw(server, keys["root"], f"/actions/{action_id}/approve", "{}")
    assert decided.status_code == 200, decided.text
    return action_id


DETAIL_CASES = {
    "NaN in result detail": '{"status": "executed", "detail": {"fee": NaN}}',
    "Infinity in result detail": '{"status": "executed", "detail": {"fee": Infinity}}',
    "lone surrogate in result detail": '{"status": "executed", "detail": {"\\ud83d": 1}}',
    "NUL in result detail": '{"status": "executed", "detail": "ok\\u0000"}',
    "detail nested 200 deep": '{"status": "executed", "detail": ' + _deep(200) + "}",
}


@pytest.mark.parametrize("case", list(DETAIL_CASES))
def test_hostile_result_detail_is_refused_over_rest_and_mcp(server, keys, approved, case):
    response = _post_raw(server, keys["agent"], f"/actions/{approved}/result", DETAIL_CASES[case])
    _assert_json_refusal(response, case)
    assert response.status_code == 422 and response.json()["field"].startswith("detail"), case
    arguments = DETAIL_CASES[case].replace("{", f'{{"action_id": "{approved}", ', 1)
    message = _mcp_outcome(*_mcp_raw(server, keys["agent"], "impri_report_result", arguments), case)
    assert message is None or "error" in message or message["result"]["isError"], case


NOTE_CASES = {
    "NUL in an approval note": ("approve", '{"note": "fine\\u0000"}', "note"),
    "NUL in a rejection note": ("reject", '{"note": "no\\u0000"}', "note"),
    "NUL in an edit value": ("approve", '{"edits": {"payload.amount_cents": "1\\u0000"}}', "edits"),
    "NaN as an edit value": ("approve", '{"edits": {"payload.amount_cents": NaN}}', "edits"),
    "lone surrogate in a note": ("reject", '{"note": "\\ud83d"}', "note"),
    "NUL in a cancel reason": ("cancel", '{"reason": "x\\u0000"}', "reason"),
}


@pytest.mark.parametrize("case", list(NOTE_CASES))
def test_hostile_decision_text_is_refused_naming_the_field(server, keys, case):
    verb, text, field = NOTE_CASES[case]
    action_id = _post_raw(server, keys["agent"], "/actions", _body()).json()["action_id"]
    key = keys["agent"] if verb == "cancel" else keys["root"]
    response = _post_raw(server, key, f"/actions/{action_id}/{verb}", text)
    _assert_json_refusal(response, case)
    assert response.status_code == 422 and response.json()["field"].startswith(field), case
    state = httpx.get(
        f"{server.url}/api/v1/actions/{action_id}",
        headers={"Authorization": f"Bearer {keys['root']}"},
    ).json()
    assert state["status"] == "pending", "a refused decision changed nothing"


QUERY_CASES = [
    "/api/v1/actions?kind=a%00b",
    "/api/v1/actions?cursor=%00",
    "/api/v1/actions/act_%00x",
    "/api/v1/actions?limit=99999999999999999999999999",
    "/api/v1/audit?until=9999-12-31T23:59:59-12:00",
    "/api/v1/audit?since=0001-01-01T00:00:00%2B14:00",
    "/api/v1/audit?until=1e400",
    "/api/v1/audit?after=99999999999999999999999999",
    "/api/v1/audit?action_id=%00",
    "/api/v1/nowhere%00",
]
PAGE_CASES = [
    "/inbox/?amount_min=1e400",
    "/inbox/?amount_max=99999999999999999999999999999",
    "/inbox/?group=99999999999999999999999",
    "/inbox/?group=-1",
    "/inbox/?q=%00",
    "/inbox/?q=%ED%A0%BD",
    "/inbox/?after=%ff%fe",
    "/inbox/decided/?amount_min=Infinity",
    "/inbox/actions/act_%00",
    "/inbox/actions/act_%ED%A0%BD",
    "/admin/approvals/action/?q=%00",
    "/admin/approvals/action/act_%00/change/",
]


@pytest.mark.parametrize("path", QUERY_CASES)
def test_hostile_api_queries_answer_json_4xx(server, keys, path):
    response = httpx.get(
        server.url + path, headers={"Authorization": f"Bearer {keys['root']}"}, timeout=30
    )
    _assert_json_refusal(response, path)
    assert response.status_code in (404, 422), (path, response.text[:200])


@pytest.mark.parametrize("path", PAGE_CASES)
def test_hostile_page_queries_never_answer_500(browser, path):
    _assert_not_a_server_error(browser.get(path), path)


def _poison(deployment, action_id: str) -> None:
    """Write what an older Impri let through: a lone surrogate key in context (SQLite only)."""
    with sqlite3.connect(deployment.data_dir / "impri.sqlite3") as db:
        db.execute(
            "UPDATE approvals_action SET context = ? WHERE id = ?",
            ('{"\\ud83d": "x", "ok": "\\udc00 tail"}', action_id),
        )


def test_every_stored_action_renders_in_the_inbox_and_the_admin(
    deployment, server, keys, browser, stored
):
    for case in sorted(STORED_CASES):
        response = _post_raw(server, keys["agent"], "/actions", PUSH_CASES[case])
        assert response.status_code == 201, (case, response.text[:300])
        stored.append(response.json()["action_id"])
    if not deployment.db_name:
        # PostgreSQL's jsonb can't hold a lone surrogate at all; SQLite's text can.
        poisoned = _post_raw(server, keys["agent"], "/actions", _body()).json()["action_id"]
        _poison(deployment, poisoned)
        stored.append(poisoned)
    for action_id in stored:
        for path in (
            f"/inbox/actions/{action_id}",
            f"/admin/approvals/action/{action_id}/change/",
        ):
            response = browser.get(path)
            assert response.status_code == 200, (path, response.status_code)
            assert "\u202e" not in response.text, "bidi overrides are shown, not obeyed"
            assert "<script>alert" not in response.text
        api = httpx.get(
            f"{server.url}/api/v1/actions/{action_id}",
            headers={"Authorization": f"Bearer {keys['root']}"},
        )
        assert api.status_code == 200, api.text[:200]
    for path in ("/inbox/", "/inbox/decided/", "/admin/approvals/action/", "/admin/"):
        assert browser.get(path).status_code == 200, path
    if not deployment.db_name:
        page = browser.get(f"/inbox/actions/{stored[-1]}").text
        assert "U+D83D" in page, "the lone surrogate is shown as a labelled badge"
