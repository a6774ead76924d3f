"""MCP over stdio (``impri mcp``): the SDK's transport, each line read one way first.

The SDK parses each stdin line itself, keeping the last of two equal keys, and
drops a line it can't parse without answering (the client waits for its
timeout). Here a line with a duplicate key or nesting past 128 levels
(``jsonrpc.json_rpc_refusal``) is answered with a JSON-RPC parse error carrying
the request's id and never reaches the SDK. stdout stays the SDK's (it points
fd 1 at stderr while it serves); stdin is read from ``sys.stdin``'s buffer as
UTF-8, as the SDK reads it.
"""

from __future__ import annotations

import io
import sys

import anyio
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from mcp_types import jsonrpc_message_adapter

from compat.mcp import run_on_streams

from .jsonrpc import json_rpc_refusal


class CheckedLines:
    """The lines of ``lines`` that read one way; the others are answered on ``answers``."""

    def __init__(self, lines):
        self.lines = lines
        self.answers = None
        self.ready = anyio.Event()

    def answer_on(self, write_stream) -> None:
        self.answers = write_stream
        self.ready.set()

    async def __aiter__(self):
        async for line in self.lines:
            refusal = json_rpc_refusal(line)
            if refusal is None:
                yield line
                continue
            await self.ready.wait()
            message = jsonrpc_message_adapter.validate_python(refusal, by_name=False)
            await self.answers.send(SessionMessage(message))


async def serve(server) -> None:
    """Serve ``server`` (an ``ImpriMCPServer``) over this process's stdin and stdout."""
    text = io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="replace")
    lines = CheckedLines(anyio.wrap_file(text))
    try:
        async with stdio_server(stdin=lines) as (read_stream, write_stream):
            lines.answer_on(write_stream)
            await run_on_streams(server, read_stream, write_stream)
    finally:
        text.detach()  # sys.stdin's buffer is not ours to close
