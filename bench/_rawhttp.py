"""A lean HTTP/1.1 client for load generation on the machine under test (not a test).

The benchmark's client shares the two cores with the server it measures, so what
the client spends on each request is taken from the server. httpx costs about
2 ms of CPU a request here; this client, which only does what a push needs
(keep-alive connections, a JSON body, a response read by Content-Length or in
chunks), costs a fraction of that. ``bench/pushes.py --client httpx`` keeps
the full client for comparison.
"""

from __future__ import annotations

import asyncio
import json as jsonlib
from urllib.parse import urlsplit


class Response:
    def __init__(self, status_code: int, content: bytes):
        self.status_code = status_code
        self.content = content

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")

    def json(self):
        return jsonlib.loads(self.content)


class RawClient:
    """``await client.post(url, json=…, headers=…)`` (or ``get``) over pooled keep-alive
    connections: one connection per request in flight, kept for the next one."""

    def __init__(self, timeout: float = 120):
        self.timeout = timeout
        self._idle: dict[tuple[str, int], list] = {}

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.aclose()

    async def aclose(self) -> None:
        for connections in self._idle.values():
            for _, writer in connections:
                writer.close()
        self._idle.clear()

    async def post(self, url: str, *, json, headers: dict[str, str]) -> Response:
        body = jsonlib.dumps(json).encode()
        fields = {**headers, "Content-Type": "application/json", "Content-Length": str(len(body))}
        return await self.request("POST", url, body=body, headers=fields)

    async def get(self, url: str, *, headers: dict[str, str], on_sent=None) -> Response:
        """``on_sent()`` is called once the request is written to its socket (a long-poll
        is then open on the server's side, as far as the client can tell)."""
        return await self.request("GET", url, headers=headers, on_sent=on_sent)

    async def request(
        self, method: str, url: str, *, body: bytes = b"", headers: dict[str, str], on_sent=None
    ) -> Response:
        parts = urlsplit(url)
        address = (parts.hostname, parts.port or 80)
        target = parts.path or "/"
        if parts.query:
            target += "?" + parts.query
        head = [f"{method} {target} HTTP/1.1", f"Host: {parts.netloc}"]
        head += [f"{name}: {value}" for name, value in headers.items()]
        request = "\r\n".join([*head, "", ""]).encode("latin-1") + body
        idle = self._idle.setdefault(address, [])
        reader, writer = idle.pop() if idle else await asyncio.open_connection(*address)
        try:
            writer.write(request)
            if on_sent is not None:
                await writer.drain()
                on_sent()
            response, keep = await asyncio.wait_for(_read(reader), self.timeout)
        except BaseException:
            writer.close()
            raise
        if keep:
            idle.append((reader, writer))
        else:
            writer.close()
        return response


async def _read(reader: asyncio.StreamReader) -> tuple[Response, bool]:
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
    status = int(head[0].split(" ", 2)[1])
    fields = {}
    for line in head[1:]:
        if line:
            name, _, value = line.partition(":")
            fields[name.strip().lower()] = value.strip()
    if "content-length" in fields:
        content = await reader.readexactly(int(fields["content-length"]))
    elif fields.get("transfer-encoding", "").lower() == "chunked":
        chunks = []
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            if size == 0:
                await reader.readuntil(b"\r\n")  # no trailers are sent here
                break
            chunks.append(await reader.readexactly(size))
            await reader.readexactly(2)
        content = b"".join(chunks)
    else:
        return Response(status, await reader.read()), False
    return Response(status, content), fields.get("connection", "").lower() != "close"
