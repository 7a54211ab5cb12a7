"""A lean HTTP/1.1 client for plain-``http://`` model endpoints (what a local vLLM or SGLang serves).

The model client only ever POSTs one JSON body and reads one whole reply, so this needs none of a
general client's machinery: a pool of keep-alive connections per host, one ``write`` of the head
and body per request, and a reply parser for ``Content-Length``, chunked and read-to-close bodies.
At 100 concurrent sessions every 0.1 ms of harness CPU per step shows in throughput
(``docs/benchmarks.md``); this costs a fraction of aiohttp's per-request work.

``DefaultTransport`` uses it for ``http://`` URLs with no proxy, and aiohttp for the rest (TLS,
proxies). A 307/308 redirect is handed to aiohttp, which follows it; other redirects would turn
the POST into a GET, so they reach the model client as HTTP errors.
"""

from __future__ import annotations

import asyncio
import os
import re
import socket
import urllib.parse
import zlib
from collections.abc import Mapping
from typing import cast

from .transport import AiohttpTransport, HTTPReply, TransportError, parse_retry_after, proxy_for

__all__ = ["DefaultTransport", "PlainHTTPTransport"]

_RESEND = frozenset({307, 308})  # redirects that repeat the POST as it was (aiohttp follows them)
_MAX_HEAD = 64 * 1024
_HEX = re.compile(rb"[0-9A-Fa-f]{1,16}")
_ERRNO = re.compile(r"\[Errno (\d+)\]")
Address = tuple[str, int]


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
        # Not an isinstance check: uvloop's transports do not subclass asyncio.Transport.
        self.transport = cast(asyncio.Transport, transport)

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
        self.reusable = False  # the server is closing this connection (idle, or after a reply)
        reply = self.reply
        waiting = self.waiter is not None and not self.waiter.done()
        if waiting and reply is not None and reply.status and reply.length is None and not reply.chunked:
            assert self.waiter is not None
            reply.body += self.buffer  # a body that ends with the connection
            self.buffer.clear()
            reply.done = True
            self.waiter.set_result(reply)
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.reusable = False
        if self.waiter is not None and not self.waiter.done():
            when = "mid-reply" if self.received else "without a reply"
            self.waiter.set_exception(TransportError(f"the server closed the connection {when}"))

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
                if reply.length < 0:
                    raise ValueError("negative Content-Length")
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
            line_end = buf.find(b"\r\n", 0, 1024)
            if line_end < 0:
                if len(buf) >= 1024:
                    raise ValueError("chunk size line too long")
                return
            size_text = bytes(buf[:line_end]).split(b";", 1)[0].strip()
            if not _HEX.fullmatch(size_text):
                raise ValueError(f"bad chunk size {size_text[:20]!r}")
            size = int(size_text, 16)
            if size == 0:
                trailer_end = buf.find(b"\r\n\r\n", line_end)
                if trailer_end < 0:
                    return  # the last CRLF (or trailers, rare) not here yet
                if len(buf) > trailer_end + 4:
                    self.reusable = False  # bytes after the reply: the connection is out of step
                reply.done = True
                buf.clear()
                return
            start = line_end + 2
            if len(buf) < start + size + 2:
                return
            if buf[start + size : start + size + 2] != b"\r\n":
                raise ValueError("chunk not followed by CRLF")
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
            try:
                port = parts.port or 80
            except ValueError:
                raise TransportError(f"bad port in {url}") from None
            if parts.scheme != "http" or not parts.hostname:
                raise TransportError(f"not a plain http URL: {url}") from None
            path = urllib.parse.quote(parts.path or "/", safe="/%:@!$&'()*+,;=~")
            if parts.query:
                path += "?" + urllib.parse.quote(parts.query, safe="/%:@!$&'()*+,;=~?")
            host = parts.netloc.rpartition("@")[2]
            line = f"POST {path} HTTP/1.1\r\nHost: {host}\r\n".encode("ascii", "replace")
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
            reason = (exc.strerror or str(exc)).lower()
            raise TransportError(f"cannot resolve the host: {reason} ({address[0]}:{address[1]})") from None
        except OSError as exc:
            # Every address refused (localhost: ::1 and 127.0.0.1): "Multiple exceptions: [Errno 111] ..."
            errno = exc.errno or next((int(m) for m in _ERRNO.findall(str(exc))), None)
            reason = (os.strerror(errno) if errno else str(exc) or "cannot connect").lower()
            raise TransportError(f"{reason} ({address[0]}:{address[1]})") from None
        return conn  # asyncio has set TCP_NODELAY already

    def _take(self, address: Address) -> _Connection | None:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # a new event loop: the old loop's connections died with it
            self._forget()
            self._loop = loop
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
            field = f"{name}: {value}"
            if "\r" in field or "\n" in field or not field.isascii():
                raise TransportError(f"the {name} header has a line break or a non-ASCII character; check its value")
            head += field.encode("ascii") + b"\r\n"
        head += b"Content-Length: %d\r\n\r\n" % len(body)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s  # one timer per attempt: lighter than asyncio.timeout
        conn = self._take(address) or await self._connect(address, deadline - loop.time(), timeout_s)
        # No resend here when a pooled connection fails: the server may have got the request; the
        # model client retries (with backoff, counted) when it should.
        timer = loop.call_at(deadline, conn.expire, timeout_s)
        try:
            reply = await conn.send(head, body)
        except BaseException:  # failed, timed out or cancelled: nobody reads the rest of its reply
            conn.close()
            raise
        finally:
            timer.cancel()
        writing = conn.transport is not None and conn.transport.get_write_buffer_size() > 0
        if conn.reusable and not conn.closed and not writing:
            self._idle.setdefault(address, []).append(conn)
        else:
            conn.close()
        return HTTPReply(reply.status, _decoded(reply), parse_retry_after(reply.headers.get("retry-after")))

    def _forget(self) -> None:
        """Close the pooled connections, or only drop them when their event loop is gone."""
        idle, self._idle = self._idle, {}
        loop = self._loop
        usable = loop is not None and not loop.is_closed()
        for conns in idle.values():
            for conn in conns:
                if usable:
                    conn.close()

    async def aclose(self) -> None:
        self._forget()


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
    """Plain ``http://`` without a proxy through ``PlainHTTPTransport``; TLS, proxies and 307/308
    redirects through aiohttp."""

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
            reply = await self.plain.post(url, body, headers, timeout_s)
            if reply.status not in _RESEND:
                return reply  # other redirects would turn the POST into a GET: an HTTP error for the client
            self._lean[url] = False  # 307/308: from now on through aiohttp, which follows them
        return await self.full.post(url, body, headers, timeout_s)

    async def aclose(self) -> None:
        try:
            await self.plain.aclose()
        finally:
            await self.full.aclose()
