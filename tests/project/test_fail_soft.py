"""Failing soft and failing loudly: every API door checks the key, errors are JSON, a missing
cache never blocks a request, and the rules cache follows every change."""

from __future__ import annotations

import pytest
from django.core.cache.backends.redis import RedisCache
from django.test import override_settings

from identity import keys
from plumbing import fallbacks
from rules import services as rule_services
from tests.conftest import ApiClient
from tests.factories import make_action

# Service tests: no test-case transaction around the code (tests/core/test_service_transactions.py).
pytestmark = pytest.mark.django_db(transaction=True)


DEAD_CACHE_PARAMS = {"OPTIONS": {"socket_connect_timeout": 0.5, "socket_timeout": 0.5}}

ROUTES = [
    ("post", "/actions"),
    ("get", "/actions"),
    ("get", "/actions/act_x"),
    ("get", "/actions/act_x/decision"),
    ("post", "/actions/act_x/result"),
    ("post", "/actions/act_x/cancel"),
    ("post", "/actions/act_x/approve"),
    ("post", "/actions/act_x/reject"),
    ("get", "/audit"),
    ("get", "/audit/verify"),
]


@pytest.mark.parametrize(("method", "path"), ROUTES)
def test_every_endpoint_refuses_an_unknown_key_with_a_json_401(db, method, path):
    response = getattr(ApiClient("imp_a_notarealkey"), method)(path)
    assert response.status_code == 401
    assert response.json()["code"] == "not_authenticated"


@pytest.mark.parametrize(("method", "path"), ROUTES)
def test_every_endpoint_refuses_a_revoked_key(agent, method, path):
    keys.revoke_key(agent.agent.keys.get())
    assert getattr(agent.client(), method)(path).status_code == 401


def test_an_unknown_api_path_is_a_json_404(agent):
    response = agent.client().get("/no/such/thing")
    assert response.status_code == 404
    assert response["Content-Type"].startswith("application/json")
    assert "no such endpoint" in response.json()["detail"]


@override_settings(IMPRI_RATE_LIMIT_PER_MIN=5)
def test_with_the_cache_down_the_rate_limiter_counts_in_this_process(agent, monkeypatch):
    # A real Redis cache client, pointed at a port where nothing listens.
    monkeypatch.setattr(keys, "cache", RedisCache("redis://127.0.0.1:1", DEAD_CACHE_PARAMS))
    keys._LOCAL_COUNTS.clear()
    before = fallbacks.counts["cache"]
    statuses = [agent.client().get("/actions").status_code for _ in range(7)]
    # Neither every call refused nor every call allowed: the limit of 5, counted here.
    assert statuses == [200] * 5 + [429] * 2
    assert fallbacks.counts["cache"] >= before + 7


def test_the_rules_in_force_follow_every_change(agent):
    first = "rules:\n  - {name: all refunds, kind: payment.refund, then: auto_approve}\n"
    second = "rules:\n  - {name: all refunds, kind: payment.refund, then: review}\n"
    rule_services.replace_rules(rule_services.parse_yaml(first), by="cli")
    assert make_action(agent.agent).status == "approved"
    loaded = rule_services.current_rules()
    assert rule_services.current_rules() is loaded  # parsed once per revision
    rule_services.replace_rules(rule_services.parse_yaml(second), by="cli")
    assert make_action(agent.agent).status == "pending"
    assert rule_services.current_rules().version == loaded.version + 1
