"""Turning untrusted agent text into HTML that can only ever be text.

Everything an agent sends (title, preview, payload and context keys and values,
rule traces that quote them) goes through one of these functions:

- ``reveal`` (``approvals.hidden_text``, shared with the admin) escapes and makes
  invisible characters visible: bidi controls (which can reorder what a reviewer
  reads, "Trojan Source"), zero-width and other format characters, Unicode tag
  characters (used to smuggle hidden instructions) and control characters.
- ``markdown`` renders with markdown-it-py with raw HTML off, then sanitizes
  with nh3 to a small allow-list; links keep only http(s) targets and get
  ``rel="noopener noreferrer"``.
"""

from __future__ import annotations

import contextlib
import json
from functools import lru_cache

import nh3
from django.utils.safestring import SafeString, mark_safe
from markdown_it import MarkdownIt

from approvals.hidden_text import has_hidden, reveal, reveal_plain  # noqa: F401 (the template tags use all three)
from plumbing import strict_json

# --- Markdown -------------------------------------------------------------------------------

ALLOWED_TAGS = {
    "p", "br", "strong", "em", "del", "code", "pre", "blockquote", "hr",
    "ul", "ol", "li", "a", "h1", "h2", "h3", "h4", "h5", "h6",
    "table", "thead", "tbody", "tr", "th", "td", "span",
}  # fmt: skip
ALLOWED_ATTRIBUTES = {"a": {"href"}, "ol": {"start"}, "span": {"class", "title"}}


def _only_http_links(tag: str, attribute: str, value: str) -> str | None:
    if tag == "a" and attribute == "href":
        return value if value.lower().startswith(("http://", "https://")) else None
    if tag == "span" and attribute in ("class", "title"):
        # Only reveal() makes spans (raw HTML is off), but check anyway.
        return value if attribute == "title" or value == "hidden-char" else None
    # Drops what ammonia allows on every tag by default (title, lang): agent text
    # in a tooltip would escape reveal().
    return None if attribute in ("title", "lang") else value


def _text_rule(self, tokens, idx, options, env) -> str:
    return reveal(tokens[idx].content)


def _code_inline_rule(self, tokens, idx, options, env) -> str:
    return f"<code>{reveal(tokens[idx].content)}</code>"


def _code_block_rule(self, tokens, idx, options, env) -> str:
    # The fence's info string ("```js") is agent text too: it is dropped, not put in a class.
    return f"<pre><code>{reveal(tokens[idx].content)}</code></pre>\n"


def _image_rule(self, tokens, idx, options, env) -> str:
    # No images from agents: a remote image is a tracking pixel. Show what it would have been.
    token = tokens[idx]
    alt = "".join(child.content for child in token.children or [])
    return f"[image: {reveal(alt)}]"


@lru_cache(maxsize=1)
def _markdown() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False})
    md.enable(["table", "strikethrough"])
    md.add_render_rule("text", _text_rule)
    md.add_render_rule("code_inline", _code_inline_rule)
    md.add_render_rule("code_block", _code_block_rule)
    md.add_render_rule("fence", _code_block_rule)
    md.add_render_rule("image", _image_rule)
    return md


def sanitize(html: str) -> SafeString:
    cleaned = nh3.clean(
        html,
        tags=ALLOWED_TAGS,
        attributes=ALLOWED_ATTRIBUTES,
        attribute_filter=_only_http_links,
        url_schemes={"http", "https"},
        link_rel="noopener noreferrer",
        strip_comments=True,
    )
    return mark_safe(cleaned)  # noqa: S308 - nh3 output under the allow-list above


def markdown(text: str) -> SafeString:
    return sanitize(_markdown().render(text or ""))


def preview(fmt: str, body: str) -> SafeString:
    """The agent's preview in its declared format; an unknown format is shown as plain text."""
    if fmt == "markdown":
        return markdown(body)
    if fmt == "diff":
        return diff(body)
    if fmt == "json":
        return pretty_json(body)
    return mark_safe(f'<pre class="plain">{reveal(body)}</pre>')  # noqa: S308


def diff(body: str) -> SafeString:
    lines = []
    for line in (body or "").splitlines():
        if line.startswith(("+++", "---", "@@")):
            kind = "hunk"
        else:
            kind = {"+": "add", "-": "del"}.get(line[:1], "same")
        lines.append(f'<span class="diff-{kind}">{reveal(line)}</span>')
    return mark_safe('<pre class="diff">' + "\n".join(lines) + "</pre>")  # noqa: S308


def pretty_json(body: str) -> SafeString:
    """Indented when it reads one way; else (a row stored before push checked it) the text as sent."""
    with contextlib.suppress(TypeError, ValueError, RecursionError):
        body = json.dumps(strict_json.loads(body), indent=2, ensure_ascii=False, sort_keys=True)
    return mark_safe(f'<pre class="json">{reveal(body)}</pre>')  # noqa: S308


def http_url(url: str | None) -> str:
    """``url`` when it is an absolute http(s) URL, else "" (so no javascript: ever becomes a link)."""
    url = (url or "").strip()
    if not url.lower().startswith(("http://", "https://")) or has_hidden(url):
        return ""
    return url


def value(data: object, depth: int = 0) -> SafeString:
    """Any JSON value as escaped HTML: objects as labelled lists, text kept as written."""
    if isinstance(data, dict) and data and depth < 8:
        items = "".join(
            f'<div class="kv"><dt>{reveal(key)}</dt><dd>{value(item, depth + 1)}</dd></div>'
            for key, item in data.items()
        )
        return mark_safe(f'<dl class="value-dict">{items}</dl>')  # noqa: S308
    if isinstance(data, list) and data and depth < 8:
        items = "".join(f"<li>{value(item, depth + 1)}</li>" for item in data)
        return mark_safe(f'<ul class="value-list">{items}</ul>')  # noqa: S308
    if isinstance(data, str):
        if data == "":
            return mark_safe('<span class="value-empty">""</span>')
        return mark_safe(f'<span class="value-text">{reveal(data)}</span>')  # noqa: S308
    text = json.dumps(data, ensure_ascii=False, sort_keys=True)
    return mark_safe(f'<span class="value-json">{reveal(text)}</span>')  # noqa: S308
