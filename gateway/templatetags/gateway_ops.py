"""The admin index's line on tools held for review (``ops/templates/admin/impri_index.html``)."""

from django import template

from gateway import pins

register = template.Library()


@register.simple_tag
def gateway_changes() -> dict[str, int]:
    """Held changes per enabled gateway, only those with any."""
    return {name: n for name, n in pins.held_counts().items() if n}
