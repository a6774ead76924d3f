"""Untrusted text with its hidden characters made visible, for the inbox and the admin.

Bidi controls (which can reorder what a reviewer reads, "Trojan Source"),
zero-width and other format characters, Unicode tag characters (used to smuggle
hidden instructions) and control characters are shown as labelled badges;
everything else is escaped.
"""

from __future__ import annotations

import unicodedata

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

# Letters that render as nothing (Hangul fillers, Khmer inherent vowels) but are
# not in a format category.
_INVISIBLE_LETTERS = {0x115F, 0x1160, 0x17B4, 0x17B5, 0x3164, 0xFFA0, 0x034F}
_ALLOWED_CONTROLS = {"\n", "\t"}


def is_hidden(char: str) -> bool:
    if char in _ALLOWED_CONTROLS:
        return False
    category = unicodedata.category(char)
    # Cs: a lone surrogate can't be encoded into the page at all (stored before push refused it).
    return category in ("Cf", "Cc", "Cs", "Zl", "Zp") or ord(char) in _INVISIBLE_LETTERS


def char_label(char: str) -> str:
    return f"U+{ord(char):04X}"


def char_name(char: str) -> str:
    return unicodedata.name(char, "control character")


def reveal(text: object) -> SafeString:
    """Escape ``text`` and show each hidden character as a visible, labelled badge."""
    text = "" if text is None else str(text)
    if not any(is_hidden(char) for char in text):
        return escape(text)
    out = []
    for char in text:
        if is_hidden(char):
            out.append(
                f'<span class="hidden-char" title="{escape(char_name(char))}">'
                f"{char_label(char)}</span>"
            )
        else:
            out.append(escape(char))
    return mark_safe("".join(out))  # noqa: S308 - every piece above is escaped


def reveal_plain(text: object) -> str:
    """Plain text with hidden characters spelled out, for places that take no markup (<title>)."""
    text = "" if text is None else str(text)
    return "".join(f"[{char_label(c)}]" if is_hidden(c) else c for c in text)


def has_hidden(text: object) -> bool:
    return any(is_hidden(char) for char in str(text or ""))
