"""``IMPRI_DB_PREPARE``: the operator's switch for the prepared statements (default on).

Off (``0``/``off``), ``compat.django.prepared_cursor`` and ``preparing`` prepare nothing:
for a transaction-pooling PgBouncer older than 1.21 or without ``max_prepared_statements``.
"""

from __future__ import annotations

import pytest
from django.db import connection, connections
from django.test import override_settings

from compat.django import prepared_cursor, preparing
from impri import settings_env, settings_vars
from tests.factories import make_action, refund

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_switch_is_on_by_default_and_off_with_0_or_off(monkeypatch):
    from django.conf import settings

    assert settings_vars.default("IMPRI_DB_PREPARE") == "on"
    monkeypatch.delenv("IMPRI_DB_PREPARE", raising=False)
    assert settings_env.envbool("IMPRI_DB_PREPARE") is True
    for value, on in (("0", False), ("off", False), ("1", True), ("on", True)):
        monkeypatch.setenv("IMPRI_DB_PREPARE", value)
        assert settings_env.envbool("IMPRI_DB_PREPARE") is on
    assert settings.IMPRI_DB_PREPARE is True  # the test settings leave it on


def _work(agent, rita):
    for amount in (1000, 9000, 1000, 9000):
        agent.client().post("/actions", refund(amount))
    for _ in range(2):
        action = make_action(agent.agent)
        response = rita.client().post(f"/actions/{action.pk}/approve", {})
        assert response.status_code == 200, response.content
    with prepared_cursor(connection) as cursor:
        cursor.execute("SELECT 1 WHERE 1 = %s", [1])
    with preparing(connection):
        assert "create_cursor" not in vars(connections["default"])
        list(type(agent.agent).objects.all())


def _prepared() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements WHERE NOT from_sql")
        return [row[0] for row in cursor.fetchall()]


@pytest.mark.parametrize("on", [False, True], ids=["off", "on"])
def test_with_the_switch_off_no_statement_is_prepared(agent, rita, on):
    if connection.vendor != "postgresql":
        pytest.skip("SQLite has no prepared statements")
    connection.close()  # a fresh connection: none prepared yet
    with override_settings(IMPRI_DB_PREPARE=on):
        if on:
            _work_on(agent, rita)
        else:
            _work(agent, rita)
    prepared = _prepared()
    assert bool(prepared) is on, prepared


def _work_on(agent, rita):
    for amount in (1000, 9000):
        agent.client().post("/actions", refund(amount))
    action = make_action(agent.agent)
    assert rita.client().post(f"/actions/{action.pk}/approve", {}).status_code == 200
