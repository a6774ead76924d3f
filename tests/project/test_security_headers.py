"""Headers a payments reviewer expects: no-store, CSP (admin too), Permissions-Policy,
HSTS and Secure cookies under HTTPS, Retry-After on 429."""

from __future__ import annotations

import httpx
import pytest
from django.test import Client

from impri.asgi import application

pytestmark = pytest.mark.django_db(transaction=True)


def _browser(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_inbox_pages_are_not_cached_and_carry_the_policies(rita):
    response = _browser(rita.user).get("/inbox/")
    assert response.status_code == 200
    assert response["Cache-Control"] == "no-store"
    assert "camera=()" in response["Permissions-Policy"]
    assert "script-src 'self'" in response["Content-Security-Policy"]
    assert "unsafe-inline" not in response["Content-Security-Policy"]


def test_admin_pages_have_a_content_security_policy(rita):
    rita.user.is_staff = rita.user.is_superuser = True
    rita.user.save()
    response = _browser(rita.user).get("/admin/approvals/agent/")
    assert response.status_code == 200
    policy = response["Content-Security-Policy"]
    assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy
    assert "no-store" in response["Cache-Control"]


def test_the_login_page_is_not_cached(db):
    assert "no-store" in Client().get("/accounts/login/")["Cache-Control"]


async def _asgi_get(path: str, key: str, **headers) -> httpx.Response:
    transport = httpx.ASGITransport(app=application)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as http:
        return await http.get(path, headers={"Authorization": f"Bearer {key}", **headers})


async def test_api_answers_through_the_real_stack_are_not_cached(agent):
    response = await _asgi_get("/api/v1/actions", agent.key)
    assert response.status_code == 200
    assert response.headers["cache-control"] == "no-store"
    refused = await _asgi_get("/api/v1/actions", "imp_a_nope")
    assert refused.status_code == 401 and refused.headers["cache-control"] == "no-store"


async def test_a_rate_limited_call_says_when_to_retry(agent, settings):
    settings.IMPRI_RATE_LIMIT_PER_MIN = 2
    statuses = [(await _asgi_get("/api/v1/actions", agent.key)) for _ in range(4)]
    limited = [r for r in statuses if r.status_code == 429]
    assert limited, [r.status_code for r in statuses]
    assert 1 <= int(limited[0].headers["retry-after"]) <= 60
    assert limited[0].json()["code"] == "rate_limited"


HTTPS_PROBE = (
    "from django.conf import settings as s; "
    "print(s.SESSION_COOKIE_SECURE, s.CSRF_COOKIE_SECURE, s.SECURE_HSTS_SECONDS, "
    "s.SECURE_PROXY_SSL_HEADER is not None)"
)


@pytest.mark.e2e  # a subprocess reads the settings afresh
@pytest.mark.parametrize(
    ("env", "https"),
    [
        ({}, False),
        ({"IMPRI_BASE_URL": "http://impri.example.com"}, False),
        ({"IMPRI_BASE_URL": "https://impri.example.com"}, True),
        ({"IMPRI_SECURE_COOKIES": "true"}, True),
        ({"IMPRI_BEHIND_PROXY": "true"}, True),
    ],
)
def test_an_https_base_url_decides_secure_cookies_hsts_and_proxy_trust(tmp_path, env, https):
    import subprocess
    import sys

    from tests.project.test_settings import ROOT

    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "import os; os.environ['DJANGO_SETTINGS_MODULE']='impri.settings'; " + HTTPS_PROBE,
        ],
        env={
            **{k: v for k, v in __import__("os").environ.items() if not k.startswith("IMPRI_")},
            "IMPRI_DATA_DIR": str(tmp_path),
            "PYTHONPATH": str(ROOT),
            **env,
        },
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    expected = f"{https} {https} {31536000 if https else 0} {https}"
    assert result.stdout.strip() == expected


def test_hsts_is_sent_on_a_secure_request(rita, settings):
    settings.SECURE_HSTS_SECONDS = 31536000
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    response = _browser(rita.user).get("/inbox/", HTTP_X_FORWARDED_PROTO="https")
    assert response["Strict-Transport-Security"] == "max-age=31536000"


@pytest.mark.parametrize(
    ("method", "path"),
    [("DELETE", "/api/v1/actions"), ("PUT", "/api/v1/audit"), ("GET", "/api/v1/actions/x/approve")],
)
async def test_a_wrong_method_on_the_api_is_a_json_405_with_allow(agent, method, path):
    transport = httpx.ASGITransport(app=application)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as http:
        response = await http.request(
            method, path, headers={"Authorization": f"Bearer {agent.key}"}
        )
    assert response.status_code == 405
    assert response.headers["content-type"].startswith("application/json")
    assert response.headers["allow"]
    assert response.json()["code"] == "http_405"
