"""Every character of an upstream's tool shown: escapes for what a reader cannot see, look-alike names.

An upstream's tool text is untrusted. What an operator reviews before accepting
it (``impri gateway tools NAME --diff``, the admin's diff) must differ wherever
the text differs, so characters that print as nothing or as another character
are written as ``\\u{E0053}``: Unicode tag characters (hidden instructions),
bidi controls ("Trojan Source"), zero-width and other format characters,
controls, combining marks, spaces other than the ASCII space, compatibility
forms (fullwidth, ligatures), private-use and unassigned code points, and letters that look like Latin ones (Cyrillic,
Greek, Armenian and other look-alikes in :data:`CONFUSABLES`).

A new tool whose name has the same *skeleton* as a pinned one is a look-alike
(``REFUND``, ``refund\\u{200B}``, ``ref\\u{57D}nd`` all look like ``refund``). The
skeleton follows Unicode TS #39 in small: NFKC, case folding, invisible
characters and marks dropped, :data:`CONFUSABLES` mapped, NFKC again. The table
covers the common Latin look-alikes, not the whole of ``confusables.txt``.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter

from approvals.hidden_text import is_hidden

# Letters (after case folding) that render like a Latin letter or digit, and what they look like.
CONFUSABLES = {
    # Cyrillic
    **dict(
        zip("авгеёзіїјкмнопрстухчѕһԁԛԝӏьъүѵӕԍԑ", "abreë3iïjkmhonpctyxyshdqwlbbyvæge", strict=True)
    ),
    # Greek
    **dict(zip("αβγεηικνορτυχωϲϳϵζ", "aßyenikvoptuxwcjez", strict=True)),
    # Armenian
    **dict(zip("սօցհոռազքյ", "uoghnnwqpj", strict=True)),
    # Latin and symbols that pass NFKC unchanged
    **dict(zip("ıȷɑɡɩʀʏᴀᴄᴅᴇᴊᴋᴍᴏᴘᴛᴜᴠᴡᴢℓ∣ǀ", "ijagiryacdejkmoptuvwzlll", strict=True)),
    # Digits and punctuation read as letters in a name
    "0": "o",
    "1": "l",
    "|": "l",
}
# Pairs of Latin letters that read as one (TS #39 maps them too).
DIGRAPHS = (("rn", "m"), ("vv", "w"))
_CATEGORIES = {"Mn", "Me", "Co", "Cn", "Zs"}  # marks, private use, unassigned, spaces
_KINDS = (
    (lambda c: 0xE0000 <= ord(c) <= 0xE007F, "tag characters"),
    (
        lambda c: (
            unicodedata.bidirectional(c)
            in {"LRE", "RLE", "LRO", "RLO", "PDF", "LRI", "RLI", "FSI", "PDI"}
            or c in "\u200e\u200f\u061c"
        ),
        "bidi controls",
    ),  # fmt: skip
    (lambda c: is_hidden(c), "invisible or control characters"),
    (lambda c: unicodedata.category(c) == "Zs", "spaces other than the ASCII space"),
    (lambda c: unicodedata.category(c) in {"Mn", "Me"}, "combining marks"),
    (lambda c: c in CONFUSABLES, "letters that look like Latin ones"),
    (lambda c: unicodedata.normalize("NFKC", c) != c, "compatibility forms (fullwidth, ligatures)"),
    (lambda c: True, "unassigned or private-use characters"),
)


def is_unclear(char: str) -> bool:
    """A character a reader cannot see, or would read as another one."""
    if char == " " or (char.isascii() and char.isprintable()):
        return False
    if char in "\n\t":
        return False
    return (
        is_hidden(char)
        or unicodedata.category(char) in _CATEGORIES
        or char in CONFUSABLES
        or unicodedata.normalize("NFKC", char) != char  # fullwidth, ligatures, math letters
    )


def escaped(text: str, *, backslash: bool = True) -> str:
    """``text`` with each unclear character as ``\\u{XXXX}`` (and ``\\`` doubled, unless told).

    ``backslash=False`` is for JSON, whose encoder has doubled them already.
    """
    out = []
    for char in text:
        if backslash and char == "\\":
            out.append("\\\\")
        elif is_unclear(char):
            out.append(f"\\u{{{ord(char):04X}}}")
        else:
            out.append(char)
    return "".join(out)


def shown_name(name: str) -> str:
    """A tool name as printed: escaped, and in backquotes when it holds a space or an escape."""
    text = escaped(name).replace(" ", "\\u{20}")
    return f"`{text}`" if text != name else name


def unclear_kinds(text: str) -> list[str]:
    """What kinds of unclear characters ``text`` holds, with how many: ``tag characters: 37``."""
    counts: Counter = Counter()
    for char in text:
        if is_unclear(char):
            counts[next(label for test, label in _KINDS if test(char))] += 1
    return [f"{label}: {n}" for label, n in counts.items()]


def texts_of(value) -> str:
    """Every string inside a tool definition (keys included), joined, to look for unclear characters."""
    if isinstance(value, dict):
        return "\n".join(texts_of(k) + "\n" + texts_of(v) for k, v in value.items())
    if isinstance(value, list):
        return "\n".join(texts_of(v) for v in value)
    return value if isinstance(value, str) else ""


def skeleton(name: str) -> str:
    """What ``name`` looks like: two names with one skeleton are confusable (TS #39, in small)."""
    text = unicodedata.normalize("NFKC", name).casefold()
    kept = []
    for char in text:
        if is_hidden(char) or unicodedata.category(char) in _CATEGORIES or char.isspace():
            continue
        kept.append(CONFUSABLES.get(char, char))
    text = unicodedata.normalize("NFKC", "".join(kept))
    for pair, single in DIGRAPHS:
        text = text.replace(pair, single)
    return re.sub(r"\s+", "", text)


def looks_like(name: str, others) -> str | None:
    """The first of ``others`` (other than ``name`` itself) that ``name`` can be mistaken for."""
    mine = skeleton(name)
    return next(
        (other for other in sorted(others) if other != name and skeleton(other) == mine), None
    )
