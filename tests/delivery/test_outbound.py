"""Outbound requests reach no internal address, and one slow receiver stalls nobody else.

Refusals are proven with loopback receivers and with names given answers of
their own (the ``hosts`` fixture): nothing here sends a packet beyond
loopback. Literal private, link-local and CGNAT addresses appear only in URLs
that must be refused before any connection is made.
"""

from __future__ import annotations

import ipaddress
import socket
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
import trustme
from django.contrib.auth.models import Group
from django.db import connection

from approvals.models import Action, GroupNotificationSettings, Notification, WebhookDelivery
from delivery import lanes, notices, sending, webhooks
from plumbing import outbound
from tests.agents.test_mcp_unit import call, connect, error_of
from tests.delivery.test_webhooks import Receiver
from tests.factories import make_action, refund_body
from tests.live import free_port

# Every spelling of an internal destination the red team used, and then some.
INTERNAL = [
    "http://127.0.0.1:{port}/hook",
    "http://127.0.0.2/hook",
    "http://localhost/hook",
    "http://LOCALHOST./hook",
    "http://api.localhost/hook",
    "http://[::1]/hook",
    "http://127.1/hook",
    "http://2130706433/hook",
    "http://0x7f000001/hook",
    "http://0177.0.0.1/hook",
    "http://0.0.0.0/hook",
    "http://0/hook",
    "http://[::]/hook",
    "http://[::ffff:127.0.0.1]/hook",
    "http://[::ffff:7f00:1]/hook",
    "http://[::127.0.0.1]/hook",
    "http://[2002:7f00:1::]/hook",
    "http://10.0.0.1/hook",
    "http://172.16.5.4/hook",
    "http://192.168.1.1/hook",
    "http://169.254.169.254/latest/meta-data/",
    "http://[fe80::1]/hook",
    "http://100.64.0.1/hook",
    "http://[fd00::1]/hook",
    "http://[fc00::1]/hook",
    "http://[::ffff:10.0.0.1]/hook",
    "http://[64:ff9b::a9fe:a9fe]/hook",
    "http://224.0.0.1/hook",
    "https://user:pw@127.0.0.1:8443/hook",
]


def hosts_file_names() -> list[str]:
    """Names /etc/hosts maps to an internal address, other than localhost itself."""
    names = []
    for line in Path("/etc/hosts").read_text().splitlines():
        fields = line.split("#", 1)[0].split()
        if len(fields) < 2:
            continue
        try:
            internal = outbound.category(ipaddress.ip_address(fields[0].split("%")[0]))
        except ValueError:
            continue
        names += [n for n in fields[1:] if internal and not outbound.is_loopback_name(n)]
    return names


@pytest.fixture
def internal_urls(hosts):
    """INTERNAL, a name from /etc/hosts, and names that resolve to internal addresses."""
    hosts["metadata.test"] = ["169.254.169.254"]
    hosts["mixed.test"] = ["93.184.215.14", "10.1.2.3"]  # one public answer is not enough
    hosts["cgnat.test"] = ["100.100.1.1"]
    hosts["ula.test"] = ["fd12:3456::1"]
    names = hosts_file_names()
    assert names, "expected /etc/hosts to name this machine"
    return [u.format(port=free_port()) for u in INTERNAL] + [
        f"http://{names[0]}/hook",
        "http://metadata.test/latest",
        "http://mixed.test/hook",
        "http://cgnat.test/hook",
        "http://ula.test/hook",
    ]


# --- The policy --------------------------------------------------------------------


def test_every_internal_spelling_is_refused_by_the_guard(internal_urls):
    for url in internal_urls:
        with pytest.raises(outbound.Refused):
            outbound.check_url(url)


def test_a_public_address_passes_and_a_name_that_does_not_resolve_is_refused(hosts):
    hosts["public.test"] = ["93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c"]
    hosts["nowhere.test"] = []
    outbound.check_url("https://public.test/hook")
    outbound.check_url("https://93.184.215.14/hook")
    with pytest.raises(outbound.Refused, match="does not resolve"):
        outbound.check_url("https://nowhere.test/hook")


def test_the_allow_list_opens_exactly_what_it_names(settings, hosts):
    settings.IMPRI_CALLBACK_ALLOWED_NETWORKS = ["127.0.0.1/32", "10.20.0.0/16"]
    hosts["receiver.internal"] = ["10.20.3.4"]
    outbound.check_url("http://127.0.0.1:9000/hook")
    outbound.check_url("http://[::ffff:127.0.0.1]:9000/hook")  # the same address
    outbound.check_url("http://receiver.internal/hook")
    for url in ("http://127.0.0.2/hook", "http://10.21.0.1/hook", "http://[::1]/hook"):
        with pytest.raises(outbound.Refused):
            outbound.check_url(url)
    # localhost is all of loopback (RFC 6761): 127.0.0.1/32 does not allow it ...
    for url in ("http://localhost/hook", "http://localhost./hook", "http://a.localhost/hook"):
        with pytest.raises(outbound.Refused, match="loopback name"):
            outbound.check_url(url)
    # ... all of loopback does.
    settings.IMPRI_CALLBACK_ALLOWED_NETWORKS = ["127.0.0.0/8", "::1/128"]
    outbound.check_url("http://localhost/hook")


# --- At push: REST and MCP ---------------------------------------------------------------


def test_rest_push_refuses_every_internal_callback_naming_the_field(agent, internal_urls):
    for url in internal_urls:
        response = agent.client().post("/actions", refund_body(callback_url=url))
        assert response.status_code == 422, (url, response.content)
        body = response.json()
        assert body["field"] == "callback_url", url
        assert body["detail"].startswith("callback_url: ")
    assert not Action.objects.exists()


def test_rest_push_refuses_a_callback_name_that_does_not_resolve(agent, hosts):
    hosts["gone.test"] = []
    response = agent.client().post("/actions", refund_body(callback_url="https://gone.test/h"))
    assert response.status_code == 422
    assert response.json()["field"] == "callback_url"
    assert "does not resolve" in response.json()["detail"]


def test_rest_push_accepts_a_public_or_allowed_callback(agent, hosts, settings):
    hosts["hooks.agent.test"] = ["93.184.215.14"]
    response = agent.client().post(
        "/actions", refund_body(callback_url="https://hooks.agent.test/impri")
    )
    assert response.status_code == 201, response.content
    settings.IMPRI_CALLBACK_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    response = agent.client().post(
        "/actions", refund_body(callback_url="http://127.0.0.1:9/impri", idempotency_key="k2")
    )
    assert response.status_code == 201, response.content


@pytest.mark.django_db(transaction=True)
async def test_mcp_push_refuses_internal_callbacks_naming_the_field(agent, hosts, internal_urls):
    hosts["nowhere.test"] = []
    async with connect(agent.key) as client:
        for url in [*internal_urls, "http://nowhere.test/hook"]:
            result = await client.call_tool("impri_push_action", refund_body(callback_url=url))
            text, error = error_of(result)
            assert error["status"] == 422, url
            assert error["field"] == "callback_url", url
            assert text.startswith("Invalid input: callback_url: ")
    assert await Action.objects.acount() == 0


@pytest.mark.django_db(transaction=True)
async def test_mcp_push_takes_a_public_callback(agent, hosts):
    hosts["hooks.agent.test"] = ["93.184.215.14"]
    url = "https://hooks.agent.test/impri"
    result = await call(agent.key, "impri_push_action", refund_body(callback_url=url))
    assert not result.is_error, result.content
    action = await Action.objects.aget(pk=result.structured_content["action_id"])
    assert action.callback_url == url


# --- At connect time -----------------------------------------------------------------------


@pytest.fixture
def receivers():
    made: list[Receiver] = []

    def make(*args, **kwargs) -> Receiver:
        made.append(Receiver(*args, **kwargs))
        return made[-1]

    yield make
    for receiver in made:
        receiver.close()


def delivery_to(persona, url: str) -> WebhookDelivery:
    action = make_action(persona.agent)
    return WebhookDelivery.objects.create(
        action=action, event="action.approved", url=url, body={"action_id": action.pk}
    )


def test_a_callback_allowed_at_push_is_refused_once_the_allow_list_drops_it(
    agent, receivers, settings
):
    receiver = receivers(agent.agent.webhook_secret)
    settings.IMPRI_CALLBACK_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    response = agent.client().post("/actions", refund_body(callback_url=receiver.url))
    assert response.status_code == 201
    delivery = delivery_to(agent, receiver.url)

    settings.IMPRI_CALLBACK_ALLOWED_NETWORKS = []
    assert webhooks.deliver_due() == 1

    assert receiver.requests == []
    delivery.refresh_from_db()
    assert delivery.gave_up_at is not None and delivery.delivered_at is None
    assert delivery.last_error.startswith("refused: 127.0.0.1 is a loopback address")
    [attempt] = delivery.attempt_log.all()
    assert attempt.status_code is None and attempt.error == delivery.last_error


def test_a_name_that_rebinds_after_push_reaches_nothing_new(agent, receivers, settings, hosts):
    # Allowed at push (127.0.0.1), then the name answers 127.0.0.2, where a
    # receiver listens too: the connection is checked again and never made.
    allowed = receivers(agent.agent.webhook_secret)
    other = Receiver(agent.agent.webhook_secret, host="127.0.0.2")
    try:
        settings.IMPRI_CALLBACK_ALLOWED_NETWORKS = ["127.0.0.1/32"]
        port = allowed.server.server_address[1]
        hosts["rebind.test"] = ["127.0.0.1"]
        url = f"http://rebind.test:{port}/hooks/impri"
        response = agent.client().post("/actions", refund_body(callback_url=url))
        assert response.status_code == 201

        other_port = other.server.server_address[1]
        hosts["rebind.test"] = ["127.0.0.2"]
        delivery = delivery_to(agent, f"http://rebind.test:{other_port}/hooks/impri")
        assert webhooks.deliver_due() == 1
        assert other.requests == [] and allowed.requests == []
        delivery.refresh_from_db()
        assert "rebind.test resolves to 127.0.0.2, which is a loopback address" in (
            delivery.last_error
        )
        assert delivery.gave_up_at is not None

        # One refused answer among allowed ones is enough to refuse.
        hosts["rebind.test"] = ["127.0.0.1", "127.0.0.2"]
        delivery = delivery_to(agent, url)
        assert webhooks.deliver_due() == 1
        assert allowed.requests == []
        delivery.refresh_from_db()
        assert delivery.last_error.startswith("refused: rebind.test resolves to 127.0.0.2")
    finally:
        other.close()


def test_the_connection_goes_to_the_checked_address_with_the_names_host_header(
    agent, receivers, settings, hosts
):
    receiver = receivers(agent.agent.webhook_secret)
    settings.IMPRI_CALLBACK_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    port = receiver.server.server_address[1]
    hosts["pinned.test"] = ["127.0.0.1"]
    delivery = delivery_to(agent, f"http://pinned.test:{port}/hooks/impri")

    assert webhooks.deliver_due() == 1

    [got] = receiver.requests
    assert got.verified
    assert got.headers["host"] == f"pinned.test:{port}"
    delivery.refresh_from_db()
    assert delivery.delivered_at is not None


class TLSReceiver:
    """An HTTPS server on 127.0.0.1 with a certificate for ``name`` only; records SNI and Host."""

    def __init__(self, ca: trustme.CA, name: str):
        self.server_names: list[str | None] = []
        self.hosts: list[str] = []
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ca.issue_cert(name).configure_cert(context)
        context.sni_callback = lambda _sock, server_name, _ctx: self.server_names.append(
            server_name
        )
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                self.rfile.read(int(self.headers.get("content-length", 0)))
                receiver.hosts.append(self.headers.get("host"))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        ).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def test_https_to_a_pinned_address_keeps_the_names_tls_server_name_and_certificate(
    settings, hosts, tmp_path, monkeypatch
):
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "ca.pem"))  # how an operator adds a CA
    settings.IMPRI_CALLBACK_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    hosts["pinned.test"] = ["127.0.0.1"]
    hosts["other.test"] = ["127.0.0.1"]
    receiver = TLSReceiver(ca, "pinned.test")
    try:
        with outbound.client("test") as client:
            answer = client.post(f"https://pinned.test:{receiver.port}/hook", content=b"{}")
            assert answer.status_code == 204
            assert receiver.server_names == ["pinned.test"]
            assert receiver.hosts == [f"pinned.test:{receiver.port}"]
            # The certificate is checked against the URL's name, not the address dialled.
            with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
                client.post(f"https://other.test:{receiver.port}/hook", content=b"{}")
    finally:
        receiver.close()


def test_a_name_that_stops_resolving_is_retried_not_given_up(agent, settings, hosts):
    hosts["flaky.test"] = []
    delivery = delivery_to(agent, "http://flaky.test/hook")
    assert webhooks.deliver_due() == 1
    delivery.refresh_from_db()
    assert delivery.gave_up_at is None and delivery.delivered_at is None
    assert "does not resolve" in delivery.last_error


def test_a_slack_hook_pointing_inside_is_never_contacted(agent, receivers, settings):
    # Written straight to the database (an operator with database access, or
    # a row from before the guard): the connect-time check still refuses it.
    hook = receivers()
    group = Group.objects.get_or_create(name=settings.IMPRI_DEFAULT_GROUP)[0]
    GroupNotificationSettings.objects.create(
        group=group, email_enabled=False, slack_webhook_url=hook.url
    )
    make_action(agent.agent)
    note = Notification.objects.get(channel=Notification.Channel.SLACK)

    assert notices.send_due() == 1

    assert hook.requests == []
    note.refresh_from_db()
    assert note.gave_up_at is not None
    assert "refused: 127.0.0.1 is a loopback address" in note.last_error


# --- Admin -------------------------------------------------------------------------------


def test_admin_refuses_an_internal_slack_webhook_url(admin_client, hosts, db):
    group = Group.objects.create(name="leads")
    hosts["hooks.internal.test"] = ["10.0.0.7"]
    for url in (
        "http://127.0.0.1:8000/x",
        "https://localhost/services/x",
        "http://169.254.169.254/latest",
        "https://hooks.internal.test/services/x",
        "http://[::ffff:127.0.0.1]/x",
    ):
        page = admin_client.post(
            "/admin/approvals/groupnotificationsettings/add/",
            {
                "group": group.pk,
                "email_enabled": "on",
                "extra_emails": "[]",
                "slack_webhook_url": url,
                "reminder_every_s": "",
            },
        )
        assert page.status_code == 200, url
        assert "Impri will not send to this URL" in page.content.decode(), url
    assert not GroupNotificationSettings.objects.exists()


def test_a_receivers_answer_is_kept_short_and_shown_as_text(
    agent, receivers, settings, admin_client
):
    settings.IMPRI_CALLBACK_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    receiver = receivers(fail_first=1, fail_status=500)
    receiver.answer = b"<script>alert(1)</script>\n" + b"secret internal page " * 100
    delivery = delivery_to(agent, receiver.url)
    assert webhooks.deliver_due() == 1
    delivery.refresh_from_db()
    assert delivery.last_error.startswith("HTTP 500: <script>alert(1)</script> secret")
    assert len(delivery.last_error) <= 10 + sending.ERROR_BODY_CHARS
    assert "\n" not in delivery.last_error

    html = admin_client.get(f"/admin/approvals/webhookdelivery/{delivery.pk}/change/")
    assert html.status_code == 200
    text = html.content.decode()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert "<script>alert(1)" not in text


# --- One receiver that never answers stalls nobody else ------------------------------------


def test_a_sweep_takes_destinations_in_turn_and_each_only_up_to_its_share(settings):
    settings.IMPRI_DELIVERY_PER_DESTINATION = 2
    rows = [(i, ("dest:a", "agent:1")) for i in range(5)] + [
        (10, ("dest:b", "agent:2")),
        (11, ("dest:c", "agent:1")),
        (12, ("dest:b", "agent:2")),
    ]
    ordered = lanes.fair_order(rows)
    assert [pk for pk, _ in ordered] == [0, 10, 11, 1, 12, 2, 3, 4]
    lane = lanes.Lane("test", "t")
    picked = lane.claim(ordered, most=50, skip=set(), background=True)
    # Agent 1 has two slots whatever host it names; b has its two.
    assert [pk for pk, _ in picked] == [0, 10, 11, 12]
    assert lane.left_behind
    assert lane.saturated("agent:") == ["1", "2"]
    assert lane.claim(ordered, most=50, skip=set(), background=True) == []  # nothing fits
    lane.release(0, rows[0][1])  # sent: no longer due, and agent 1 has room again
    rest = [row for row in ordered if row[0] != 0]
    assert [pk for pk, _ in lane.claim(rest, 50, set(), background=True)] == [1]


class Staller:
    """Accepts connections on 127.0.0.1 and never answers (nor reads)."""

    def __init__(self):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.accepted: list[socket.socket] = []
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}/never"

    def _accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted.append(conn)

    def close(self):
        self.sock.close()
        for conn in self.accepted:
            conn.close()


def wait_for_idle_lanes(timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while webhooks.LANE.active or notices.LANE.active:
        assert time.monotonic() < deadline, "the lanes did not finish their sends"
        time.sleep(0.05)


@pytest.mark.django_db(transaction=True)
def test_a_receiver_that_never_answers_delays_no_one_else(agent, other_agent, receivers, settings):
    settings.IMPRI_CALLBACK_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    assert settings.IMPRI_WEBHOOK_TIMEOUT_S == 10  # the default: a stalled send costs 10 s
    staller = Staller()
    healthy = receivers(other_agent.agent.webhook_secret)
    slack = receivers()
    try:
        group = Group.objects.get_or_create(name=settings.IMPRI_DEFAULT_GROUP)[0]
        GroupNotificationSettings.objects.create(
            group=group, email_enabled=False, slack_webhook_url=slack.url
        )
        stalled = [delivery_to(agent, staller.url) for _ in range(9)]
        wanted = delivery_to(other_agent, healthy.url)  # also writes a Slack notification
        assert Notification.objects.filter(channel="slack").count() == 10

        started = time.monotonic()
        webhooks.deliver_in_background()  # what the ticker and the Celery task run
        notices.send_in_background()
        healthy.wait_for(1, timeout=5)
        slack.wait_for(10, timeout=5)
        assert time.monotonic() - started < 5
        assert healthy.ids() == [wanted.id]

        # While the stalled sends still hang, a later webhook goes out at the next sweep.
        later = delivery_to(other_agent, healthy.url)
        webhooks.deliver_in_background()
        healthy.wait_for(2, timeout=5)
        assert healthy.ids() == [wanted.id, later.id]
        assert time.monotonic() - started < 8

        # The staller holds at most its fair share of the lane.
        assert len(staller.accepted) <= lanes.per_destination()
        assert WebhookDelivery.objects.filter(
            pk__in=[d.pk for d in stalled], attempts__gt=0
        ).count() == len(staller.accepted)
    finally:
        staller.close()
        wait_for_idle_lanes()
        connection.close()
