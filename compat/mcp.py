"""The MCP SDK's private attribute Impri reads: ``MCPServer._lowlevel_server``.

Reason: ``MCPServer.run_stdio_async`` serves stdio with ``stdio_server()`` and no way to
give it another stdin; Impri's stdio reads each line one way first (``agent_doors.mcp.stdio``:
a duplicate key or too deep a nesting is answered with a JSON-RPC error and never reaches
the SDK, which would keep the last key). The SDK's public parts do the rest:
``mcp.server.stdio.stdio_server(stdin=...)`` takes our checked lines, and the low-level
``Server.run(read, write, initialization_options)`` serves over its streams; only the way
from the high-level ``MCPServer`` to its low-level ``Server`` is private. Needed for
correctness (one reading of each message), not speed.

Relies on: ``MCPServer._lowlevel_server`` being the low-level ``Server`` with ``run`` and
``create_initialization_options``. ``tests/project/test_compat.py`` serves Impri's tools
over lines we give, and a line with a duplicate key is answered with an error while the
next one is served.

Exit plan: the SDK means to make it public (``mcp/client/_memory.py``: "TODO: Make
`lowlevel_server` public"); then read that attribute, or pass ``stdin`` to
``run_stdio_async`` if it grows one, and delete this module.
"""

from __future__ import annotations


async def run_on_streams(server, read_stream, write_stream) -> None:
    """``MCPServer.run_stdio_async`` over the streams given, not ``stdio_server()``'s own."""
    lowlevel = server._lowlevel_server
    await lowlevel.run(read_stream, write_stream, lowlevel.create_initialization_options())
