"""MCP adapter: the agent side of the service layer as MCP tools.

The same server object serves streamable HTTP (``agent_doors/mcp/http.py``, the agent
comes from the bearer key checked by the SDK's token verifier), stdio
(``impri mcp``, the agent comes from ``IMPRI_API_KEY``) and in-process tests.
``tools`` holds the tools and ``build_server``; ``server`` the identity, the
error mapping (errors are tool results with ``isError: true``: a domain error
keeps the message REST sends in ``detail`` and carries its REST status in
``_meta``; invalid arguments name the field; anything unexpected is logged with
its traceback by the SDK, and the caller sees only the tool's name) and the
waits' own tasks.
"""

from .server import AGENT_SCOPE, ERROR_META_KEY, AgentAccessToken, ImpriMCPServer, settle_waits
from .tools import INSTRUCTIONS, build_server

__all__ = [
    "AGENT_SCOPE",
    "ERROR_META_KEY",
    "INSTRUCTIONS",
    "AgentAccessToken",
    "ImpriMCPServer",
    "build_server",
    "settle_waits",
]
