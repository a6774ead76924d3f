"""Talking to an upstream MCP server with the official SDK client.

Every list and call opens its own connection (streamable HTTP, or a fresh
stdio process) and closes it afterwards: nothing is shared between agents,
and a configuration change applies to the next call. ``${VAR}`` in headers,
command and env is read from this process's environment at that moment.

Nothing here retries: a call that fails is reported to the caller as it
failed, because a money-moving call repeated on our own could move money twice.

Two kinds of failure: :class:`UpstreamError` when the upstream could not be
reached or broke off (transport: it counts as down in ``/readyz``), and
:class:`UpstreamRefused` when it answered with a JSON-RPC error (an unknown
tool, invalid params): it is up, and its message is what the agent gets.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

import anyio
import httpx2
from mcp import Client, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT, CallToolResult, Tool

from .models import VAR_RE, Upstream

CONNECT_TIMEOUT_S = 10.0
LIST_TIMEOUT_S = 20.0
CALL_READ_TIMEOUT_S = 300.0


class UpstreamError(Exception):
    """The upstream could not be reached, or broke off; the message says which and why."""


class UpstreamRefused(Exception):
    """The upstream answered with a JSON-RPC error (unknown tool, invalid params): it is up."""

    def __init__(self, message: str, code: int | None = None):
        super().__init__(message)
        self.code = code


def _leaf(exc: BaseException) -> BaseException:
    """The first real exception inside the SDK's task-group exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


@dataclass(frozen=True)
class Target:
    """What is needed to reach one upstream, detached from the ORM (safe across threads)."""

    name: str
    url: str
    command: tuple[str, ...]
    headers: dict
    env: dict

    @classmethod
    def of(cls, upstream: Upstream) -> Target:
        return cls(
            upstream.name,
            upstream.url,
            tuple(upstream.command),
            dict(upstream.headers),
            dict(upstream.env),
        )


def expand(text: str, where: str) -> str:
    """``text`` with each ``${VAR}`` replaced from the environment; UpstreamError names a missing one."""

    def value(match) -> str:
        name = match.group(1)
        if name not in os.environ:
            raise UpstreamError(
                f"{where} uses ${{{name}}}, which is not set in Impri's environment"
            )
        return os.environ[name]

    return VAR_RE.sub(value, text)


@asynccontextmanager
async def connect(target: Target, *, read_timeout_s: float = CALL_READ_TIMEOUT_S):
    """An initialized SDK client session to ``target``."""
    where = f"gateway {target.name!r}"
    if target.url:
        headers = {k: expand(v, f"{where}: headers.{k}") for k, v in target.headers.items()}
        http = httpx2.AsyncClient(
            headers=headers,
            timeout=httpx2.Timeout(CONNECT_TIMEOUT_S, read=read_timeout_s),
            follow_redirects=False,
        )
        transport = streamable_http_client(target.url, http_client=http)
    else:
        http = None
        command = [expand(part, f"{where}: command") for part in target.command]
        env = {k: expand(v, f"{where}: env.{k}") for k, v in target.env.items()}
        params = StdioServerParameters(command=command[0], args=command[1:], env=env or None)
        transport = stdio_client(params, errlog=sys.stderr)
    try:
        async with Client(transport, mode="legacy") as client:
            yield client
    finally:
        if http is not None:
            await http.aclose()


def dump_tools(tools: list[Tool]) -> list[dict]:
    """Tools as JSON, as the upstream wrote them (the names of the protocol: ``inputSchema``)."""
    return [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in tools]


def describe(exc: BaseException) -> str:
    """One line for an error that may be an exception group from the SDK's task groups."""
    exc = _leaf(exc)
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if text != type(exc).__name__ else text


async def list_tools(target: Target) -> list[Tool]:
    """Every tool the upstream offers (all pages)."""
    try:
        async with connect(target, read_timeout_s=LIST_TIMEOUT_S) as client:
            return await _all_tools(target, client)
    except (UpstreamError, UpstreamRefused):
        raise
    except BaseException as exc:
        raise _classified(exc, f"upstream {target.name!r} is unreachable") from None


async def _all_tools(target: Target, client: Client) -> list[Tool]:
    try:
        with anyio.fail_after(LIST_TIMEOUT_S):
            tools: list[Tool] = []
            cursor = None
            for _ in range(100):
                page = await client.list_tools(cursor=cursor, cache_mode="refresh")
                tools += page.tools
                cursor = page.next_cursor
                if not cursor:
                    break
            return tools
    except TimeoutError:
        raise UpstreamError(
            f"upstream {target.name!r} did not list its tools within {LIST_TIMEOUT_S:.0f} s"
        ) from None


def _classified(exc: BaseException, where: str) -> BaseException:
    """A JSON-RPC error the upstream answered is UpstreamRefused; anything else UpstreamError.

    Another exception of ours (a check that refused the call) is returned as it is.
    """
    leaf = _leaf(exc)
    if isinstance(leaf, MCPError) and not _transport(leaf):
        return UpstreamRefused(leaf.message or str(leaf), leaf.code)
    if isinstance(leaf, UpstreamError | UpstreamRefused | Refusal):
        return leaf
    if not isinstance(leaf, Exception):
        return exc  # cancellation and the like pass through untouched
    # connection refused, TLS, HTTP 4xx/5xx, a process that exits
    return UpstreamError(f"{where}: {describe(leaf)}")


def _transport(error: MCPError) -> bool:
    """The SDK's own codes for a connection that closed or a response that never came.

    They are never sent on the wire by the SDK; a server that uses -32000 for
    its own errors says something else than the SDK's words.
    """
    if error.code == CONNECTION_CLOSED:
        return error.message == "Connection closed"
    return error.code == REQUEST_TIMEOUT and error.message.startswith("Request ")


class Refusal(Exception):
    """Raised by a call's ``check`` to stop before the upstream is called."""


Check = Callable[[list[Tool]], Awaitable[None]]
Progress = Callable[[float, float | None, str | None], Awaitable[None]]


async def call_tool(
    target: Target,
    tool: str,
    arguments: dict,
    *,
    check: Check | None = None,
    progress: Progress | None = None,
) -> CallToolResult:
    """One call, never repeated. A tool error is a result (``is_error``), not an exception.

    With ``check``, the upstream's tools are listed first on the same connection
    and handed to it; it raises a :class:`Refusal` to stop before the call.
    ``progress`` receives the upstream's progress notifications for the call.
    """
    try:
        async with connect(target) as client:
            if check is not None:
                await check(await _all_tools(target, client))
            return await client.call_tool(tool, arguments, progress_callback=progress)
    except (UpstreamError, UpstreamRefused, Refusal):
        raise
    except BaseException as exc:
        raise _classified(
            exc, f"upstream {target.name!r} could not complete the call to {tool}"
        ) from None
