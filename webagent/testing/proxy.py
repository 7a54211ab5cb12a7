"""A forward HTTP proxy on 127.0.0.1 that logs what it forwards (for the ``[browser] proxy`` tests).

``LoggingProxy(username=..., password=...)`` asks for Basic proxy credentials (407 until they
come) and forwards plain-HTTP requests (absolute-form targets) to their origin, one request per
connection; ``CONNECT`` tunnels are refused (the test sites are plain HTTP). ``forwarded`` lists
what went through: method, URL, and whether the credentials came with it (never their value).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
from dataclasses import dataclass, field
from typing import Self
from urllib.parse import urlsplit

from .threaded import LoopThread

__all__ = ["Forwarded", "LoggingProxy"]

_HEAD_LIMIT = 64 * 1024
_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Forwarded:
    method: str
    url: str
    authorized: bool


@dataclass
class LoggingProxy:
    username: str | None = None
    password: str | None = None
    port: int = 0
    forwarded: list[Forwarded] = field(default_factory=list)
    refused: int = 0  # requests answered 407
    _thread: LoopThread = field(default_factory=lambda: LoopThread("logging-proxy"))
    _server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> Self:
        self._thread.start(self._start)
        return self

    def __exit__(self, *exc: object) -> None:
        self._thread.stop(self._close)

    async def _start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()

    def _authorized(self, headers: dict[str, str]) -> bool:
        if self.username is None:
            return True
        expected = base64.b64encode(f"{self.username}:{self.password or ''}".encode()).decode()
        return headers.get("proxy-authorization", "") == f"Basic {expected}"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(_TIMEOUT_S):
                await self._serve_one(reader, writer)
        except (TimeoutError, OSError, ValueError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _serve_one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        if len(head) > _HEAD_LIMIT:
            return
        lines = head.decode("latin-1").split("\r\n")
        method, target, version = lines[0].split(" ", 2)
        headers: dict[str, str] = {}
        raw_headers: list[tuple[str, str]] = []
        for line in lines[1:]:
            if ":" in line:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
                raw_headers.append((name.strip(), value.strip()))
        authorized = self._authorized(headers)
        if not authorized:
            self.refused += 1
            writer.write(
                b'HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic realm="proxy"\r\n'
                b"Content-Length: 0\r\nConnection: close\r\n\r\n"
            )
            await writer.drain()
            return
        if method == "CONNECT":
            writer.write(b"HTTP/1.1 501 Not Implemented\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            await writer.drain()
            return
        self.forwarded.append(Forwarded(method, target, authorized=self.username is not None))
        parts = urlsplit(target)
        body = b""
        length = int(headers.get("content-length", "0") or 0)
        if length:
            body = await reader.readexactly(length)
        upstream_reader, upstream_writer = await asyncio.open_connection(parts.hostname, parts.port or 80)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        kept = [
            (n, v) for n, v in raw_headers if n.lower() not in ("proxy-authorization", "proxy-connection", "connection")
        ]
        request = (
            f"{method} {path} {version}\r\n" + "".join(f"{n}: {v}\r\n" for n, v in kept) + "Connection: close\r\n\r\n"
        )
        upstream_writer.write(request.encode("latin-1") + body)
        await upstream_writer.drain()
        try:
            while chunk := await upstream_reader.read(65536):
                writer.write(chunk)
                await writer.drain()
        finally:
            upstream_writer.close()
