"""``{% movements_panel action %}``: an action's movements and reconciliation state, on its page."""

from __future__ import annotations

from django import template

from approvals.money import Money, approved

from .. import selectors, services
from ..models import EXCEPTIONS

register = template.Library()


@register.filter
def money(minor, currency) -> str:
    return str(Money(minor, currency))


@register.inclusion_tag("ledger/_movements.html", takes_context=True)
def movements_panel(context, action) -> dict:
    settlement = selectors.settlement_of(action.pk)
    movements = list(selectors.movements_of(action.pk))
    request = context.get("request")
    user = getattr(request, "user", None)
    return {
        "action": action,
        "settlement": settlement,
        "movements": movements,
        "approved": approved(action) or {},
        "open": settlement is not None and settlement.state in EXCEPTIONS,
        "can_reconcile": services.can_reconcile(user),
        "csrf_token": context.get("csrf_token"),
        "shown": settlement is not None or bool(movements),
    }


@register.inclusion_tag("ledger/_summary.html")
def reconciliation_panel() -> dict:
    """The dashboard's panel: matched %, exceptions by state, money in exceptions per currency."""
    return {"summary": selectors.summary()}
