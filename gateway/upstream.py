"""Talking to an upstream MCP server with the official SDK client.

Every list and call opens its own connection (streamable HTTP, or a fresh
stdio process) and closes it afterwards: nothing is shared between agents,
and a configuration change applies to the next call. ``${VAR}`` in headers,
command and env is read from this process's environment at that moment.

Nothing here retries: a call that fails is reported to the caller as it
failed, because a money-moving call repeated on our own could move money twice.
"""

from __future__ import annotations

import os
import sys
from contextlib import asynccontextmanager
from dataclasses import dataclass

import anyio
import httpx2
from mcp import Client, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult, Tool

from .models import VAR_RE, Upstream

CONNECT_TIMEOUT_S = 10.0
LIST_TIMEOUT_S = 20.0
CALL_READ_TIMEOUT_S = 300.0


class UpstreamError(Exception):
    """The upstream could not be reached, or broke off; the message says which and why."""


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


def describe(exc: BaseException) -> str:
    """One line for an error that may be an exception group from the SDK's task groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if text != type(exc).__name__ else text


async def list_tools(target: Target) -> list[Tool]:
    """Every tool the upstream offers (all pages)."""
    try:
        with anyio.fail_after(LIST_TIMEOUT_S):
            async with connect(target, read_timeout_s=LIST_TIMEOUT_S) as client:
                tools: list[Tool] = []
                cursor = None
                for _ in range(100):
                    page = await client.list_tools(cursor=cursor)
                    tools += page.tools
                    cursor = page.next_cursor
                    if not cursor:
                        break
                return tools
    except UpstreamError:
        raise
    except TimeoutError:
        raise UpstreamError(
            f"upstream {target.name!r} did not list its tools within {LIST_TIMEOUT_S:.0f} s"
        ) from None
    except Exception as exc:  # connection refused, TLS, HTTP 4xx/5xx, a process that exits
        raise UpstreamError(f"upstream {target.name!r} is unreachable: {describe(exc)}") from None


async def call_tool(target: Target, tool: str, arguments: dict) -> CallToolResult:
    """One call, never repeated. A tool error is a result (``is_error``), not an exception."""
    try:
        async with connect(target) as client:
            return await client.call_tool(tool, arguments)
    except UpstreamError:
        raise
    except Exception as exc:
        raise UpstreamError(
            f"upstream {target.name!r} could not complete the call to {tool}: {describe(exc)}"
        ) from None
