"""One public base URL for every link: API answers, MCP, e-mails, Slack; and a warning when unset."""

from __future__ import annotations

import pytest

from approvals.presenters import inbox_url
from plumbing import public_url
from tests.factories import make_action

pytestmark = pytest.mark.django_db


def test_the_configured_base_url_wins_over_the_request(settings, agent):
    settings.IMPRI_BASE_URL = "https://impri.example.com"
    action = make_action(agent.agent)
    assert inbox_url(action, "http://10.0.0.5:8000/") == (
        f"https://impri.example.com/inbox/actions/{action.pk}"
    )


def test_without_it_the_request_origin_then_where_serve_listens(settings, agent):
    settings.IMPRI_BASE_URL = ""
    settings.IMPRI_HOST, settings.IMPRI_PORT = "0.0.0.0", 8123
    action = make_action(agent.agent)
    assert inbox_url(action, "http://impri.internal:9000/").startswith(
        "http://impri.internal:9000/"
    )
    assert inbox_url(action) == f"http://127.0.0.1:8123/inbox/actions/{action.pk}"
    settings.IMPRI_HOST = "::1"
    assert public_url.base_url() == "http://[::1]:8123"


@pytest.mark.parametrize(
    ("base", "database_url", "host", "warned"),
    [
        ("", "postgres://db/impri", "127.0.0.1", True),  # scaled
        ("", "", "0.0.0.0", True),  # listening beyond loopback
        ("", "", "127.0.0.1", False),  # the embedded default on one machine
        ("https://impri.example.com", "postgres://db/impri", "0.0.0.0", False),
    ],
)
def test_a_system_check_warns_when_production_has_no_base_url(
    settings, base, database_url, host, warned
):
    settings.IMPRI_BASE_URL, settings.DATABASE_URL, settings.IMPRI_HOST = base, database_url, host
    settings.DEBUG = False
    messages = public_url.base_url_is_set()
    assert [m.id for m in messages] == (["impri.W001"] if warned else [])
