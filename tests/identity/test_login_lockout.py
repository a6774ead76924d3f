"""Password guessing: locked out by username and address together, audited once per lockout."""

from __future__ import annotations

import sys
from io import StringIO

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.test import Client, RequestFactory

from audit.models import AuditEvent
from plumbing.addresses import client_address

LOGIN = "/accounts/login/"


@pytest.fixture(autouse=True)
def _small_limit(settings):
    settings.AXES_FAILURE_LIMIT = 3


def _login(
    password: str,
    *,
    username: str = "rita",
    address: str = "203.0.113.7",
    client: Client | None = None,
    **extra,
):
    return (client or Client()).post(
        LOGIN, {"username": username, "password": password}, REMOTE_ADDR=address, **extra
    )


def test_guessing_locks_the_username_from_that_address_even_for_the_right_password(rita):
    assert [_login("wrong").status_code for _ in range(3)] == [200, 200, 429]
    browser = Client()
    locked = _login("rita-password", client=browser)
    assert locked.status_code == 429
    assert int(locked["Retry-After"]) == 900
    # The browser that sent the right password is not logged in: no session came back,
    # and the inbox still sends it to the login page.
    assert "sessionid" not in locked.cookies
    assert "_auth_user_id" not in browser.session
    assert browser.get("/inbox/", REMOTE_ADDR="203.0.113.7").status_code == 302
    assert not AuditEvent.objects.filter(event="reviewer.login").exists()
    # The same browser from an address that did not guess logs in: the lock was the refusal.
    assert _login("rita-password", address="198.51.100.9", client=browser).status_code == 302
    assert browser.session["_auth_user_id"] == str(rita.user.pk)
    assert browser.get("/inbox/", REMOTE_ADDR="198.51.100.9").status_code == 200


def test_the_same_username_from_another_address_still_logs_in(rita):
    for _ in range(4):
        _login("wrong")
    assert _login("rita-password", address="198.51.100.2").status_code == 302


def test_another_username_from_the_guessing_address_is_not_locked(rita, sam):
    for _ in range(4):
        _login("wrong")
    assert _login("sam-password", username="sam").status_code == 302


def test_a_success_before_the_limit_resets_the_count(rita):
    _login("wrong")
    _login("wrong")
    assert _login("rita-password").status_code == 302
    _login("wrong")
    _login("wrong")
    assert _login("rita-password").status_code == 302


def test_a_lockout_is_one_audit_event_and_single_guesses_none(rita):
    for _ in range(10):
        _login("wrong", username="rita")
    for name in ("x" * 150, "admin", "root"):
        _login("wrong", username=name)
    events = list(AuditEvent.objects.filter(event__startswith="reviewer."))
    assert [(e.event, e.data["username"], e.data["ip"]) for e in events] == [
        ("reviewer.locked_out", "rita", "203.0.113.7")
    ]
    assert events[0].data["failures"] == 3


def test_forwarded_for_is_ignored_unless_the_peer_is_a_trusted_proxy(rita, settings):
    for n in range(4):
        _login("wrong", HTTP_X_FORWARDED_FOR=f"192.0.2.{n}")
    assert _login("rita-password", HTTP_X_FORWARDED_FOR="192.0.2.99").status_code == 429


def _request(peer: str, forwarded: str | None = None):
    extra = {"HTTP_X_FORWARDED_FOR": forwarded} if forwarded is not None else {}
    return RequestFactory().get("/", REMOTE_ADDR=peer, **extra)


@pytest.mark.parametrize(
    ("peer", "forwarded", "expected"),
    [
        ("203.0.113.7", "1.2.3.4", "203.0.113.7"),  # untrusted peer: header ignored
        ("10.0.0.5", "1.2.3.4", "1.2.3.4"),
        ("10.0.0.5", "6.6.6.6, 1.2.3.4", "1.2.3.4"),  # the client wrote 6.6.6.6
        ("10.0.0.5", "1.2.3.4, 10.0.0.9", "1.2.3.4"),  # two of our proxies
        ("10.0.0.5", "not-an-ip, 1.2.3.4", "1.2.3.4"),
        ("10.0.0.5", "1.2.3.4, garbage", "10.0.0.5"),
        ("10.0.0.5", "", "10.0.0.5"),
        ("10.0.0.5", "2001:db8::1", "2001:db8::1"),
    ],
)
def test_client_address_trusts_only_configured_proxies(settings, peer, forwarded, expected):
    import ipaddress

    settings.IMPRI_TRUSTED_PROXIES = [ipaddress.ip_network("10.0.0.0/8")]
    assert client_address(_request(peer, forwarded)) == expected


def test_a_successful_login_audits_the_client_address_behind_a_trusted_proxy(rita, settings):
    import ipaddress

    settings.IMPRI_TRUSTED_PROXIES = [ipaddress.ip_network("127.0.0.1/32")]
    response = _login("rita-password", address="127.0.0.1", HTTP_X_FORWARDED_FOR="198.51.100.9")
    assert response.status_code == 302
    event = AuditEvent.objects.get(event="reviewer.login")
    assert event.data["ip"] == "198.51.100.9"


# --- createreviewer and the password validators ------------------------------------------


def _createreviewer(*args) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command("createreviewer", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_a_weak_password_is_refused(db, monkeypatch):
    for weak in ("short", "password1234", "123456789012", "lee-reviewer"):
        monkeypatch.setattr("sys.stdin", StringIO(weak + "\n"))
        with pytest.raises(CommandError, match="password refused"):
            _createreviewer("lee-reviewer", "--password-file", "-")
        assert not User.objects.filter(username="lee-reviewer").exists()


def test_the_password_comes_from_a_file(db, tmp_path):
    secret = tmp_path / "pw"
    secret.write_text("a long and private phrase\n")
    _createreviewer("lee", "--password-file", str(secret))
    assert User.objects.get(username="lee").check_password("a long and private phrase")


def test_the_password_comes_from_the_environment(db, monkeypatch):
    monkeypatch.setenv("IMPRI_REVIEWER_PASSWORD", "from the environment 42")
    _createreviewer("lee")
    assert User.objects.get(username="lee").check_password("from the environment 42")


def test_the_password_comes_from_a_prompt_typed_twice(db, monkeypatch):
    answers = iter(["typed at the prompt 7", "typed at the prompt 7"])
    monkeypatch.setattr("getpass.getpass", lambda prompt="": next(answers))
    # At a terminal (without one, the prompt is refused: tests/project/test_cli_errors.py).
    monkeypatch.setattr(sys.stdin, "isatty", lambda: True)
    _createreviewer("lee", "--password-prompt")
    assert User.objects.get(username="lee").check_password("typed at the prompt 7")


def test_password_on_the_command_line_still_works_with_a_warning(db):
    _, err = _createreviewer("lee", "--password", "on the command line 9")
    assert "process" in err and "warning" in err
    assert User.objects.get(username="lee").check_password("on the command line 9")
