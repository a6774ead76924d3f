"""Single sign-on through a real OpenID Connect provider, against a real Impri server.

The provider is django-oauth-toolkit with OIDC on (tests/oidc_provider/), in its
own process on a loopback port, signing RS256 ID tokens with a key made at its
start. The test walks the authorization-code flow over HTTP as a browser would:
Impri's SSO link, the provider's login form, back to Impri's callback, the inbox.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from html.parser import HTMLParser
from pathlib import Path

import httpx
import pytest

from tests.factories import refund_body
from tests.live import ROOT, Deployment, free_port

pytestmark = pytest.mark.e2e

CLIENT_ID = "impri-inbox"


class Provider:
    def __init__(self, port: int, redirect_uri: str, secret: str, claims: dict):
        self.dir = Path(tempfile.mkdtemp(prefix="impri-op-"))
        self.url = f"http://127.0.0.1:{port}"
        self.claims = claims
        self._write_claims()
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("IMPRI_", "DJANGO_"))},
            "OP_DIR": str(self.dir),
            "OP_URL": self.url,
            "PYTHONPATH": str(ROOT),
        }
        self.log = open(self.dir / "provider.log", "w+")  # noqa: SIM115
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.oidc_provider.serve"]
            + [str(port), CLIENT_ID, secret, redirect_uri],
            env=env,
            cwd=ROOT,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        self._wait_ready()

    def _wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the provider exited:\n{self.output()}")
            try:
                answer = httpx.get(self.url + "/o/.well-known/openid-configuration", timeout=1)
                if answer.status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"the provider did not come up:\n{self.output()}")

    def _write_claims(self) -> None:
        (self.dir / "claims.json").write_text(json.dumps(self.claims))

    def set_claims(self, username: str, **claims) -> None:
        self.claims[username].update(claims)
        self._write_claims()

    def output(self) -> str:
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=15)
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="module")
def sso():
    op_port = free_port()
    secret = secrets.token_urlsafe(24)
    secret_dir = Path(tempfile.mkdtemp(prefix="impri-secret-"))
    (secret_dir / "oidc_secret").write_text(secret + "\n")
    deployment = Deployment(
        IMPRI_OIDC_ISSUER=f"http://127.0.0.1:{op_port}/o",
        IMPRI_OIDC_CLIENT_ID=CLIENT_ID,
        IMPRI_OIDC_CLIENT_SECRET_FILE=str(secret_dir / "oidc_secret"),
        IMPRI_OIDC_GROUPS_CLAIM="groups",
    )
    provider = None
    try:
        server = deployment.start_server()
        # Impri learns the provider's endpoints at first use: it may start first.
        provider = Provider(
            op_port,
            f"{server.url}/accounts/oidc/callback/",
            secret,
            claims={
                "carol": {
                    "email": "carol@example.com",
                    "email_verified": True,
                    "groups": ["reviewers", "no-such-impri-group"],
                    "amr": ["pwd", "otp"],
                },
                "boss": {"email": "boss@example.com", "email_verified": True, "groups": []},
            },
        )
        shell(
            deployment,
            "[Group.objects.get_or_create(name=n) for n in ('reviewers', 'finance')]; "
            "User.objects.create_superuser('admin', 'boss@example.com', None)",
        )
        agent_key = deployment.last_word("createagent", "support-bot")
        yield deployment, server, provider, agent_key
    finally:
        if provider is not None:
            provider.stop()
        deployment.close()
        shutil.rmtree(secret_dir, ignore_errors=True)


def shell(deployment: Deployment, code: str) -> str:
    prelude = (
        "import json; from django.contrib.auth.models import Group, User; "
        "from django.contrib.sessions.models import Session; "
        "from audit.models import AuditEvent; "
    )
    result = deployment.impri("shell", "-c", prelude + code, check=False)
    assert result.returncode == 0, result.stderr
    # The last line: Django's shell may announce its automatic imports first.
    return result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""


class Inputs(HTMLParser):
    """The named inputs of a page, as a browser would submit them."""

    def __init__(self):
        super().__init__()
        self.values: dict[str, str] = {}

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "input" and attrs.get("name"):
            self.values[attrs["name"]] = attrs.get("value") or ""


def inputs(html: str) -> dict[str, str]:
    parser = Inputs()
    parser.feed(html)
    return parser.values


def sign_in(server, provider: Provider, username: str, *, lands: str = "/inbox/") -> httpx.Client:
    """Impri's "Sign in with SSO", the provider's login form, and back: a logged-in browser."""
    browser = httpx.Client(follow_redirects=True, timeout=30)
    login = browser.get(server.url + "/accounts/login/")
    assert "Sign in with SSO" in login.text
    page = browser.get(server.url + "/accounts/oidc/authenticate/", params={"next": "/inbox/"})
    assert page.url.host == "127.0.0.1" and page.url.port == int(provider.url.rsplit(":", 1)[1])
    assert page.url.path == "/login/", page.text
    landed = browser.post(
        str(page.url),
        data={
            "username": username,
            "password": f"{username}-password",
            "csrfmiddlewaretoken": inputs(page.text)["csrfmiddlewaretoken"],
        },
    )
    assert landed.status_code == 200, landed.text
    assert str(landed.url) == server.url + lands, landed.url
    browser.landed = landed
    return browser


def push(server, agent_key: str) -> str:
    answer = server.client(agent_key).post("/actions", json=refund_body())
    assert answer.status_code == 201, answer.text
    return answer.json()["action_id"]


def approve_in_inbox(server, browser: httpx.Client, action_id: str) -> httpx.Response:
    page = browser.get(f"{server.url}/inbox/actions/{action_id}")
    assert page.status_code == 200, page.text
    form = {k: v for k, v in inputs(page.text).items() if k.startswith(("approve-", "csrf"))}
    return browser.post(
        f"{server.url}/inbox/actions/{action_id}/decide",
        data={**form, "approve-verdict": "approve"},
    )


def test_sso_login_maps_groups_and_removal_at_the_provider_revokes_approval(sso):
    deployment, server, provider, agent_key = sso

    # 1. First sign-in: the account is created, its groups come from the provider.
    browser = sign_in(server, provider, "carol")
    carol = json.loads(
        shell(
            deployment,
            "u = User.objects.get(username='carol'); print(json.dumps({"
            "'email': u.email, 'usable': u.has_usable_password(), "
            "'groups': sorted(u.groups.values_list('name', flat=True)), "
            "'identities': list(u.sso_identities.values_list('issuer', flat=True))}))",
        )
    )
    assert carol == {
        "email": "carol@example.com",
        "usable": False,
        "groups": ["reviewers"],  # a group Impri does not have is not created
        "identities": [f"{provider.url}/o"],
    }
    # The provider's amr claim is in the session, for the second-factor check.
    session = browser.cookies["sessionid"]
    amr = shell(
        deployment,
        f"print(json.dumps(Session.objects.get(session_key={session!r}).get_decoded()))",
    )
    assert json.loads(amr)["impri_amr"] == ["pwd", "otp"]
    assert json.loads(amr)["impri_login_method"] == "oidc"

    # 2. Carol approves an action of her group from the inbox.
    first = push(server, agent_key)
    answer = approve_in_inbox(server, browser, first)
    assert answer.status_code == 200, answer.text
    status = server.client(agent_key).get(f"/actions/{first}").json()["status"]
    assert status == "approved"
    token = deployment.last_word("token", "carol")

    # 3. The provider takes her out of the group; at her next sign-in Impri does too.
    provider.set_claims("carol", groups=["finance"])
    browser = sign_in(server, provider, "carol")
    groups = shell(
        deployment,
        "print(sorted(User.objects.get(username='carol').groups.values_list('name', flat=True)))",
    )
    assert groups == "['finance']"

    second = push(server, agent_key)
    refused = server.client(token).post(f"/actions/{second}/approve", json={})
    # Outside the action's group: the 404 of an unknown id (its existence does not leak).
    assert refused.status_code == 404, refused.text
    assert approve_in_inbox_refused(server, browser, second)
    status = server.client(agent_key).get(f"/actions/{second}").json()["status"]
    assert status == "pending"

    # 4. Both sign-ins are audited as such, and every membership change is attributed to the
    # provider.
    events = json.loads(
        shell(
            deployment,
            "print(json.dumps([[e.event, e.actor_id, e.data] for e in AuditEvent.objects"
            ".filter(event__in=['user.groups_changed', 'user.sso_linked', 'user.created', "
            "'reviewer.login']).order_by('seq')]))",
        )
    )
    logins = [event for event in events if event[0] == "reviewer.login"]
    assert [(actor, data["method"]) for _, actor, data in logins] == [("carol", "oidc")] * 2
    events = [e for e in events if e[0] != "reviewer.login" and e[2]["user"] == "carol"]
    sub = events[1][2]["subject"]
    assert events == [
        ["user.created", "oidc", {**events[0][2], "user": "carol", "source": "oidc"}],
        [
            "user.sso_linked",
            "oidc",
            {
                "user": "carol",
                "user_ref": events[0][2]["user_ref"],
                "issuer": f"{provider.url}/o",
                "subject": sub,
                "how": "created",
                "source": "oidc",
            },
        ],
        [
            "user.groups_changed",
            "oidc",
            {
                "user": "carol",
                "user_ref": events[0][2]["user_ref"],
                "added": ["reviewers"],
                "source": "oidc",
            },
        ],
        [
            "user.groups_changed",
            "oidc",
            {
                "user": "carol",
                "user_ref": events[0][2]["user_ref"],
                "removed": ["reviewers"],
                "source": "oidc",
            },
        ],
        [
            "user.groups_changed",
            "oidc",
            {
                "user": "carol",
                "user_ref": events[0][2]["user_ref"],
                "added": ["finance"],
                "source": "oidc",
            },
        ],
    ]


def approve_in_inbox_refused(server, browser: httpx.Client, action_id: str) -> bool:
    """The inbox no longer shows her the action, nor takes her approval (404, as for any outsider)."""
    page = browser.get(f"{server.url}/inbox/actions/{action_id}")
    csrf = browser.cookies["csrftoken"]
    answer = browser.post(
        f"{server.url}/inbox/actions/{action_id}/decide",
        data={"csrfmiddlewaretoken": csrf, "approve-verdict": "approve"},
    )
    return page.status_code == 404 and answer.status_code == 404


def test_an_administrators_account_is_not_taken_over_by_a_matching_email(sso):
    deployment, server, provider, _ = sso
    browser = sign_in(server, provider, "boss", lands="/accounts/login/")
    assert "Single sign-on failed: the Impri account with this e-mail is an administrator" in (
        browser.landed.text
    )
    assert "sessionid" not in browser.cookies or "_auth_user_id" not in shell(
        deployment,
        f"print(Session.objects.get(session_key={browser.cookies['sessionid']!r}).get_decoded())",
    )
