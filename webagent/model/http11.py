"""A lean HTTP/1.1 client for plain-``http://`` model endpoints (what a local vLLM or SGLang serves).

The model client only ever POSTs one JSON body and reads one whole reply, so this needs none of a
general client's machinery: a pool of keep-alive connections per host, one ``write`` of the head
and body per request, and a reply parser for ``Content-Length``, chunked and read-to-close bodies.
At 100 concurrent sessions every 0.1 ms of harness CPU per step shows in throughput
(``docs/benchmarks.md``); this costs a fraction of aiohttp's per-request work.

``DefaultTransport`` uses it for ``http://`` URLs with no proxy, and aiohttp for the rest (TLS,
proxies). A redirect reply is handed to aiohttp as well, which follows it.
"""

from __future__ import annotations

import asyncio
import os
import socket
import urllib.parse
import zlib
from collections.abc import Mapping

from .transport import AiohttpTransport, HTTPReply, TransportError, parse_retry_after, proxy_for

__all__ = ["DefaultTransport", "PlainHTTPTransport"]

_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_MAX_HEAD = 64 * 1024
Address = tuple[str, int]


class _Redirect(Exception):
    """The reply is a redirect: the caller hands the request to a full client."""


class _Reply:
    """One reply being parsed from the bytes a connection receives."""

    __slots__ = ("body", "chunked", "done", "headers", "length", "status")

    def __init__(self) -> None:
        self.status = 0
        self.headers: dict[str, str] = {}
        self.length: int | None = None  # None: until the connection closes (or chunked)
        self.chunked = False
        self.body = bytearray()
        self.done = False


class _Connection(asyncio.Protocol):
    """One keep-alive connection: a request is written, its reply parsed as bytes arrive."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.reply: _Reply | None = None
        self.waiter: asyncio.Future[_Reply] | None = None
        self.closed = False
        self.received = False  # any reply bytes for the current request
        self.reusable = True

    # -- asyncio.Protocol ---------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.received = True
        if self.waiter is None or self.waiter.done():
            self.reusable = False  # bytes nobody asked for: do not reuse this connection
            return
        self.buffer += data
        try:
            self._parse()
        except ValueError as exc:
            self.reusable = False
            self.waiter.set_exception(TransportError(f"bad HTTP reply: {exc}"))

    def eof_received(self) -> bool | None:
        reply = self.reply
        waiting = self.waiter is not None and not self.waiter.done()
        if waiting and reply is not None and reply.status and reply.length is None and not reply.chunked:
            assert self.waiter is not None
            reply.body += self.buffer  # a body that ends with the connection
            self.buffer.clear()
            reply.done = True
            self.reusable = False
            self.waiter.set_result(reply)
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.reusable = False
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(TransportError("the server closed the connection without a reply"))

    # -- requests -----------------------------------------------------------------------------
    def expire(self, timeout_s: float) -> None:
        """The request's deadline passed: fail it and drop the connection."""
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(TransportError(f"no reply within {timeout_s:g} s", timeout=True))
        self.close()

    def send(self, head: bytes | bytearray, body: bytes) -> asyncio.Future[_Reply]:
        assert self.transport is not None
        loop = asyncio.get_running_loop()
        self.waiter = loop.create_future()
        self.reply = _Reply()
        self.received = False
        self.transport.writelines((head, body))
        return self.waiter

    def _parse(self) -> None:
        reply, buf = self.reply, self.buffer
        assert reply is not None and self.waiter is not None
        while not reply.status:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                if len(buf) > _MAX_HEAD:
                    raise ValueError("header block too long")
                return
            head = bytes(buf[:end]).decode("latin-1")
            del buf[: end + 4]
            status_line, _, header_lines = head.partition("\r\n")
            version, _, rest = status_line.partition(" ")
            if not version.startswith("HTTP/1."):
                raise ValueError(f"not HTTP/1.x: {status_line[:40]!r}")
            status = int(rest[:3])
            if 100 <= status < 200:
                continue  # 100 Continue and other interim replies
            headers: dict[str, str] = {}
            for line in header_lines.split("\r\n"):
                name, sep, value = line.partition(":")
                if sep:
                    headers[name.strip().lower()] = value.strip()
            reply.status, reply.headers = status, headers
            if "chunked" in headers.get("transfer-encoding", "").lower():
                reply.chunked = True
            elif "content-length" in headers:
                reply.length = int(headers["content-length"])
            elif status in (204, 304):
                reply.length = 0
            if version == "HTTP/1.0" or "close" in headers.get("connection", "").lower():
                self.reusable = False
            if reply.length is None and not reply.chunked:
                self.reusable = False  # the body ends when the connection does
        if reply.chunked:
            self._parse_chunks(reply)
        elif reply.length is not None and len(buf) >= reply.length:
            reply.body = buf[: reply.length]
            if len(buf) > reply.length:
                self.reusable = False
            buf.clear()
            reply.done = True
        if reply.done:
            self.waiter.set_result(reply)

    def _parse_chunks(self, reply: _Reply) -> None:
        buf = self.buffer
        while True:
            line_end = buf.find(b"\r\n")
            if line_end < 0:
                return
            size = int(bytes(buf[:line_end]).split(b";", 1)[0].strip() or b"x", 16)
            if size == 0:
                trailer_end = buf.find(b"\r\n\r\n", line_end)
                if trailer_end < 0 and buf[line_end : line_end + 4] != b"\r\n\r\n":
                    return  # trailers (rare) not complete yet
                reply.done = True
                del buf[:]
                return
            start = line_end + 2
            if len(buf) < start + size + 2:
                return
            reply.body += buf[start : start + size]
            del buf[: start + size + 2]

    def close(self) -> None:
        self.reusable = False
        if self.transport is not None and not self.closed:
            self.transport.close()


class PlainHTTPTransport:
    """POSTs over pooled HTTP/1.1 keep-alive connections, for ``http://`` URLs only."""

    def __init__(self) -> None:
        self._idle: dict[Address, list[_Connection]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._targets: dict[str, tuple[Address, bytes]] = {}  # url -> (host, port), request line + Host

    def _target(self, url: str) -> tuple[Address, bytes]:
        try:
            return self._targets[url]
        except KeyError:
            parts = urllib.parse.urlsplit(url)
            if parts.scheme != "http" or not parts.hostname:
                raise TransportError(f"not a plain http URL: {url}") from None
            port = parts.port or 80
            path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
            host = parts.netloc.rpartition("@")[2]
            line = f"POST {path} HTTP/1.1\r\nHost: {host}\r\n".encode("latin-1")
            target = self._targets[url] = ((parts.hostname, port), line)
            return target

    async def _connect(self, address: Address, remaining_s: float, timeout_s: float) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(remaining_s):
                _, conn = await loop.create_connection(_Connection, address[0], address[1])
        except TimeoutError:
            raise TransportError(f"no reply within {timeout_s:g} s", timeout=True) from None
        except socket.gaierror as exc:
            raise TransportError(f"cannot resolve the host: {(exc.strerror or str(exc)).lower()}") from None
        except OSError as exc:
            reason = (os.strerror(exc.errno) if exc.errno else str(exc) or "cannot connect").lower()
            raise TransportError(f"{reason} ({address[0]}:{address[1]})") from None
        sock = conn.transport.get_extra_info("socket") if conn.transport else None
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn

    def _take(self, address: Address) -> _Connection | None:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # a new event loop: the old loop's connections died with it
            self._idle, self._loop = {}, loop
        idle = self._idle.get(address)
        while idle:
            conn = idle.pop()
            if not conn.closed and conn.reusable:
                return conn
            conn.close()
        return None

    async def post(self, url: str, body: bytes, headers: Mapping[str, str], timeout_s: float) -> HTTPReply:
        address, line = self._target(url)
        head = bytearray(line)
        for name, value in headers.items():
            head += f"{name}: {value}\r\n".encode("latin-1")
        head += f"Content-Length: {len(body)}\r\n\r\n".encode("latin-1")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s  # one timer per attempt: lighter than asyncio.timeout
        conn = self._take(address)
        reused = conn is not None
        while True:
            if conn is None:
                conn = await self._connect(address, deadline - loop.time(), timeout_s)
            timer = loop.call_at(deadline, conn.expire, timeout_s)
            try:
                reply = await conn.send(head, body)
                break
            except TransportError as exc:
                conn.close()
                if exc.timeout or not (reused and not conn.received):
                    raise
                # A pooled connection the server had closed while idle: once, on a new one.
                conn, reused = None, False
            except BaseException:  # cancelled: the reply may still come, on a connection nobody reads
                conn.close()
                raise
            finally:
                timer.cancel()
        if conn.reusable and not conn.closed:
            self._idle.setdefault(address, []).append(conn)
        else:
            conn.close()
        if reply.status in _REDIRECTS:
            raise _Redirect
        return HTTPReply(reply.status, _decoded(reply), parse_retry_after(reply.headers.get("retry-after")))

    async def aclose(self) -> None:
        idle, self._idle = self._idle, {}
        for conns in idle.values():
            for conn in conns:
                conn.close()


def _decoded(reply: _Reply) -> bytes:
    encoding = reply.headers.get("content-encoding", "identity").lower()
    body = bytes(reply.body)
    if encoding in ("identity", ""):
        return body
    try:
        if encoding in ("gzip", "x-gzip"):
            return zlib.decompress(body, 16 + zlib.MAX_WBITS)
        if encoding == "deflate":
            return zlib.decompress(body)
    except zlib.error as exc:
        raise TransportError(f"bad {encoding} reply body: {exc}") from None
    raise TransportError(f"the server sent a {encoding!r}-encoded reply, which is not supported")


class DefaultTransport:
    """Plain ``http://`` without a proxy through ``PlainHTTPTransport``; TLS, proxies and redirects
    through aiohttp."""

    def __init__(self) -> None:
        self.plain = PlainHTTPTransport()
        self.full = AiohttpTransport()
        self._lean: dict[str, bool] = {}

    def _is_plain(self, url: str) -> bool:
        try:
            return self._lean[url]
        except KeyError:
            lean = self._lean[url] = url.startswith("http://") and proxy_for(url) is None
            return lean

    async def post(self, url: str, body: bytes, headers: Mapping[str, str], timeout_s: float) -> HTTPReply:
        if self._is_plain(url):
            try:
                return await self.plain.post(url, body, headers, timeout_s)
            except _Redirect:
                self._lean[url] = False  # from now on through aiohttp, which follows it
        return await self.full.post(url, body, headers, timeout_s)

    async def aclose(self) -> None:
        await self.plain.aclose()
        await self.full.aclose()
