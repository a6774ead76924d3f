"""The inbox's money filters: what an action moves in total, per currency (issue 39)."""

from __future__ import annotations

from django import template

from inbox import presenters

register = template.Library()


@register.filter
def money_totals(action) -> list[presenters.Total]:
    """The totals per currency that add up several amounts, with their parts."""
    return presenters.money_totals(action)
