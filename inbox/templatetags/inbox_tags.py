"""Template filters for untrusted agent text; each one escapes (see ``inbox.render``)."""

from __future__ import annotations

from django import template
from django.core.exceptions import ObjectDoesNotExist
from django.utils import timezone
from django.utils.safestring import SafeString

from inbox import presenters, render

register = template.Library()


@register.filter
def reveal(text: object) -> SafeString:
    """Escape and show hidden characters (bidi overrides, zero-width) as visible badges."""
    return render.reveal(text)


@register.filter
def reveal_path(path: object) -> SafeString:
    """``reveal`` for a dotted path, breakable only after a dot: never mid-word on a phone."""
    segments = str(path).split(".")
    return SafeString(".<wbr>".join(render.reveal(segment) for segment in segments))


@register.filter
def reveal_plain(text: object) -> str:
    return render.reveal_plain(text)


@register.filter
def has_hidden(text: object) -> bool:
    return render.has_hidden(text)


@register.filter
def json_value(data: object) -> SafeString:
    return render.value(data)


@register.filter
def http_url(url: str | None) -> str:
    return render.http_url(url)


@register.filter
def label(key: object) -> str:
    """``customer_message`` → ``Customer message`` (escaped by the caller's autoescape)."""
    text = str(key).replace("_", " ").replace("-", " ").strip()
    return text[:1].upper() + text[1:]


@register.simple_tag
def preview(action) -> SafeString:
    return render.preview(action.preview_format, action.preview_body)


@register.filter
def lookup(mapping: dict, key):
    """``mapping[key]`` for keys a template cannot spell (ints, dotted paths)."""
    return mapping.get(key)


@register.simple_tag
def query_with(request, **changes) -> str:
    """The current query string with ``changes`` applied (``None`` removes a key)."""
    query = request.GET.copy()
    for key, value in changes.items():
        query.pop(key, None)
        if value not in (None, ""):
            query[key] = value
    query.pop("only", None)
    encoded = query.urlencode()
    return f"?{encoded}" if encoded else "?"


@register.filter
def payload_money(action) -> presenters.Money | None:
    return presenters.action_money.primary(action)


@register.filter
def live_claim(action):
    """The row's "someone is on it": the action's claim while it lasts (loaded with the row)."""
    try:
        claim = action.claim
    except ObjectDoesNotExist:
        return None
    if action.is_settled or claim.expires_at <= timezone.now():
        return None
    return claim


@register.filter
def title_mismatch(action) -> bool:
    """The queue row's warning: the title names an amount the payload does not."""
    return bool(presenters.amount_mismatches(action, preview=False))


@register.filter
def money_warning(action) -> bool:
    """The queue row's warning: an amount or currency that breaks the money convention."""
    return bool(presenters.money_warnings(action))
