"""A JSON-RPC message that doesn't read one way is refused before the MCP SDK parses it.

Shared by both MCP transports: streamable HTTP (``agent_doors.mcp.http``) and stdio
(``agent_doors.mcp.stdio``).
"""

from __future__ import annotations

import json
import re

from plumbing import strict_json

PARSE_ERROR = -32700  # JSON-RPC's code for a message that can't be read
# Below the SDK's own JSON parser's limit (about 200), so every message refused for its
# depth is refused here, with its id; a tool's argument past 64 is the schema's error.
MESSAGE_DEPTH = 2 * strict_json.MAX_DEPTH


def json_rpc_refusal(body: str | bytes) -> dict | None:
    """The JSON-RPC error for a message that doesn't read one way, else None.

    A duplicate key or nesting past ``MESSAGE_DEPTH`` is refused before the SDK
    parses the message (it keeps the last key, and its parser gives up past its
    own depth). Text that isn't JSON at all is left to the SDK's own parse error. The
    error carries the request's id when it has exactly one, so the client matches it to
    its call (over stdio nothing else would: the call would wait for its timeout).
    """
    try:
        strict_json.loads(body, max_depth=MESSAGE_DEPTH)
    except strict_json.Refused as exc:
        try:
            found = _request_id(body)
        except ValueError:  # refused unparsed: the id itself may not be JSON
            found = None
        return {
            "jsonrpc": "2.0",
            "id": found,
            "error": {"code": PARSE_ERROR, "message": f"Parse error: {exc}"},
        }
    except ValueError:
        return None
    return None


# A JSON string, a key (a string and its colon), or a bracket.
_TOKENS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"(\s*:)?|[\[\]{}]', re.DOTALL)


def _request_id(body: str | bytes) -> str | int | None:
    """The message's ``id`` when its object has exactly one, a string or an integer.

    Read by a scan that parses nothing but the top level's keys and the id itself, so a
    message nested 10,000 deep still gets its id back.
    """
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    if not text.lstrip().startswith("{"):
        return None
    depth, found = 0, []
    for match in _TOKENS.finditer(text):
        token = match.group()
        if token in ("[", "{"):
            depth += 1
        elif token in ("]", "}"):
            depth -= 1
        elif (
            depth == 1
            and match.group(1)
            and json.loads(token[: match.start(1) - match.start()]) == "id"
        ):
            start = len(text) - len(text[match.end() :].lstrip())
            if text[start : start + 1] in ("[", "{"):
                return None
            found.append(json.JSONDecoder().raw_decode(text, start)[0])
    if len(found) == 1 and isinstance(found[0], str | int) and not isinstance(found[0], bool):
        return found[0]
    return None
