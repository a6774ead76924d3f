"""The MCP SDK's private attribute Impri reads: ``MCPServer._lowlevel_server``.

``MCPServer.run_stdio_async`` serves stdio with ``stdio_server()`` and no way to
give it another stdin; Impri's stdio reads each line one way first
(``approvals.mcp.stdio``: a duplicate key or too deep a nesting is answered
with a JSON-RPC error and never reaches the SDK, which would keep the last key).
So the method's body is copied here, over streams the caller opens. Needed for
correctness, not speed.

Re-read ``mcp/server/mcpserver/server.py`` (``MCPServer.run_stdio_async``) before
moving ``WRITTEN_FOR`` (``tests/project/test_compat.py``).
"""

from __future__ import annotations

WRITTEN_FOR = {"mcp": "2.3"}
UPSTREAM = {"mcp.server.mcpserver.server:MCPServer.run_stdio_async": "bf4f995905dacd91"}


async def run_on_streams(server, read_stream, write_stream) -> None:
    """``MCPServer.run_stdio_async`` over the streams given, not ``stdio_server()``'s own."""
    lowlevel = server._lowlevel_server
    await lowlevel.run(read_stream, write_stream, lowlevel.create_initialization_options())
