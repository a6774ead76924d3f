"""Words for an action without money: its kind read as a sentence, and its telling fields.

``email.send`` with ``{"to": …, "subject": …}`` reads "Send email · to … · subject …"
instead of the kind's last word. Pure functions; templates escape what they return.
"""

from __future__ import annotations

import re

# Words that say what a kind does, wherever they sit in it ("email.send", "send_email").
VERBS = frozenset(
    [
        "add",
        "apply",
        "approve",
        "archive",
        "assign",
        "ban",
        "block",
        "cancel",
        "change",
        "charge",
        "close",
        "create",
        "credit",
        "delete",
        "deploy",
        "disable",
        "email",
        "enable",
        "export",
        "grant",
        "import",
        "invite",
        "issue",
        "merge",
        "migrate",
        "notify",
        "pay",
        "post",
        "publish",
        "purge",
        "refund",
        "release",
        "remove",
        "rename",
        "reply",
        "reset",
        "restart",
        "revoke",
        "roll",
        "rollback",
        "run",
        "schedule",
        "send",
        "ship",
        "suspend",
        "transfer",
        "unblock",
        "update",
        "upgrade",
        "void",
        "withdraw",
        "write",
    ]
)
# Payload keys most worth reading first in the "what will happen" line, best first.
TELLING_KEYS = [
    "to",
    "recipient",
    "recipients",
    "email",
    "customer",
    "customer_id",
    "user",
    "user_id",
    "account",
    "account_id",
    "environment",
    "env",
    "service",
    "repo",
    "repository",
    "branch",
    "version",
    "tag",
    "target",
    "name",
    "id",
    "subject",
    "plan",
    "quantity",
    "count",
    "reason",
]
MAX_DETAILS = 4
MAX_DETAIL_CHARS = 80


def kind_sentence(kind: str) -> str:
    """``email.send`` → "Send email", ``crm.contact_delete`` → "Delete crm contact"."""
    words = [w for w in re.split(r"[._-]+", kind) if w]
    if not words:
        return kind
    verb_at = next((i for i in range(len(words) - 1, -1, -1) if words[i] in VERBS), None)
    if verb_at is None:
        return " ".join(words).capitalize()
    rest = words[:verb_at] + words[verb_at + 1 :]
    return " ".join([words[verb_at], *rest]).capitalize()


def telling_details(payload: dict) -> tuple[tuple[str, str], ...]:
    """Up to MAX_DETAILS short top-level values, telling keys first, each as (label, text)."""

    def rank(key: str) -> int:
        return TELLING_KEYS.index(key) if key in TELLING_KEYS else len(TELLING_KEYS)

    out = []
    for key in sorted(payload, key=lambda k: (rank(str(k)), list(payload).index(k))):
        value = payload[key]
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            continue
        if key == "order_id":  # said as "on order …"
            continue
        text = str(value)
        if not text or len(text) > MAX_DETAIL_CHARS:
            continue
        out.append((str(key).replace("_", " "), text))
        if len(out) == MAX_DETAILS:
            break
    return tuple(out)
