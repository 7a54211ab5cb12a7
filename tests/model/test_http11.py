"""The lean HTTP/1.1 client against real sockets: scripted raw replies, the offline server, routing."""

from __future__ import annotations

import asyncio
import gzip
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import pytest

from webagent.model.http11 import DefaultTransport, PlainHTTPTransport
from webagent.model.transport import TransportError

Reply = Callable[[bytes], bytes | None]  # request head+body -> raw reply bytes (None: close at once)


class RawServer:
    """A socket server that answers each request with scripted raw bytes and records what came."""

    def __init__(self, *replies: bytes | None, close_after: bool = False) -> None:
        self.replies = list(replies)
        self.close_after = close_after
        self.requests: list[tuple[int, bytes, bytes]] = []  # (connection number, head, body)
        self.connections = 0
        self.writers: list[asyncio.StreamWriter] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        number = self.connections
        self.writers.append(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                body = await reader.readexactly(length)
                self.requests.append((number, head, body))
                reply = self.replies.pop(0) if self.replies else None
                if reply is None:
                    break
                writer.write(reply)
                await writer.drain()
                if self.close_after:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@asynccontextmanager
async def raw_server(server: RawServer) -> AsyncIterator[str]:
    listener = await asyncio.start_server(server.handle, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/v1/chat/completions"
    finally:
        listener.close()
        for writer in server.writers:
            writer.close()
        await listener.wait_closed()


def ok(body: bytes = b'{"ok": true}', extra: str = "") -> bytes:
    return f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n{extra}\r\n".encode() + body


async def test_keep_alive_reuses_one_connection_and_sends_a_well_formed_request() -> None:
    server = RawServer(ok(b"one"), ok(b"two"), ok(b"three"))
    transport = PlainHTTPTransport()
    async with raw_server(server) as url:
        bodies = [(await transport.post(url, b'{"n": %d}' % i, {"X-Test": "yes"}, 5.0)).body for i in range(3)]
    await transport.aclose()
    assert bodies == [b"one", b"two", b"three"]
    assert server.connections == 1 and [r[0] for r in server.requests] == [1, 1, 1]
    head, body = server.requests[1][1], server.requests[1][2]
    lines = head.decode().split("\r\n")
    assert lines[0] == "POST /v1/chat/completions HTTP/1.1"
    assert "Host: 127.0.0.1:" + url.split(":")[2].split("/")[0] in lines
    assert "X-Test: yes" in lines and "Content-Length: 8" in lines and body == b'{"n": 1}'


async def test_concurrent_requests_each_get_a_connection_then_share_the_pool() -> None:
    server = RawServer(*[ok(b"%d" % i) for i in range(6)])
    transport = PlainHTTPTransport()
    async with raw_server(server) as url:
        first = await asyncio.gather(*(transport.post(url, b"{}", {}, 5.0) for _ in range(3)))
        second = await asyncio.gather(*(transport.post(url, b"{}", {}, 5.0) for _ in range(3)))
    await transport.aclose()
    assert sorted(r.body for r in first + second) == [b"%d" % i for i in range(6)]
    assert server.connections == 3  # the second round reused the three idle connections


@pytest.mark.parametrize(
    ("raw", "body"),
    [
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\n\r\n",
            b"hello world",
        ),
        (b"HTTP/1.1 100 Continue\r\n\r\n" + ok(b"after interim"), b"after interim"),
        (ok(gzip.compress(b"zipped"), "Content-Encoding: gzip\r\n"), b"zipped"),
        (b"HTTP/1.1 204 No Content\r\n\r\n", b""),
    ],
)
async def test_reply_framings(raw: bytes, body: bytes) -> None:
    server = RawServer(raw, ok(b"next"))
    transport = PlainHTTPTransport()
    async with raw_server(server) as url:
        assert (await transport.post(url, b"{}", {}, 5.0)).body == body
        assert (await transport.post(url, b"{}", {}, 5.0)).body == b"next"  # the connection is still in step
    await transport.aclose()
    assert server.connections == 1


async def test_reply_split_into_single_bytes() -> None:
    """The parser copes with any fragmentation of the reply."""
    raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nRetry-After: 3\r\n\r\n3\r\nabc\r\n0\r\n\r\n"

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        await reader.readexactly(2)
        for i in range(len(raw)):
            writer.write(raw[i : i + 1])
            await writer.drain()
            await asyncio.sleep(0)
        writer.close()

    listener = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    transport = PlainHTTPTransport()
    reply = await transport.post(f"http://127.0.0.1:{port}/x", b"{}", {}, 5.0)
    await transport.aclose()
    listener.close()
    assert (reply.status, reply.body, reply.retry_after_s) == (200, b"abc", 3.0)


async def test_a_body_that_ends_with_the_connection() -> None:
    server = RawServer(b"HTTP/1.0 503 Service Unavailable\r\n\r\nbusy, try later", ok(b"fresh"), close_after=True)
    transport = PlainHTTPTransport()
    async with raw_server(server) as url:
        reply = await transport.post(url, b"{}", {}, 5.0)
        assert (reply.status, reply.body) == (503, b"busy, try later")
        assert (await transport.post(url, b"{}", {}, 5.0)).body == b"fresh"
    await transport.aclose()
    assert server.connections == 2


async def test_connection_close_is_honoured() -> None:
    server = RawServer(ok(b"a", "Connection: close\r\n"), ok(b"b"))
    transport = PlainHTTPTransport()
    async with raw_server(server) as url:
        assert (await transport.post(url, b"{}", {}, 5.0)).body == b"a"
        assert (await transport.post(url, b"{}", {}, 5.0)).body == b"b"
    await transport.aclose()
    assert server.connections == 2


async def test_a_pooled_connection_the_server_closed_is_replaced_once() -> None:
    server = RawServer(ok(b"first"), ok(b"second"), close_after=True)  # the server drops each connection
    transport = PlainHTTPTransport()
    async with raw_server(server) as url:
        assert (await transport.post(url, b"{}", {}, 5.0)).body == b"first"
        await asyncio.sleep(0.05)  # the close arrives while the connection idles in the pool
        assert (await transport.post(url, b"{}", {}, 5.0)).body == b"second"
    await transport.aclose()
    assert server.connections == 2


async def test_a_pooled_connection_dropped_with_the_request_is_not_resent() -> None:
    """The server may have got the POST: resending is the model client's call (with backoff)."""
    server = RawServer(ok(b"first"), None, ok(b"second"))  # the 2nd request: read, then the connection closed
    transport = PlainHTTPTransport()
    async with raw_server(server) as url:
        assert (await transport.post(url, b"{}", {}, 5.0)).body == b"first"
        with pytest.raises(TransportError, match="closed the connection without a reply"):
            await transport.post(url, b"{}", {}, 5.0)
        assert (await transport.post(url, b"{}", {}, 5.0)).body == b"second"
    await transport.aclose()
    assert server.connections == 2 and [r[0] for r in server.requests] == [1, 1, 2]


async def test_a_cancelled_request_leaves_no_connection_out_of_step() -> None:
    async def slow_then_fast(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            await reader.readexactly(int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0]))
            if b"slow" in head:
                await asyncio.sleep(0.3)
            writer.write(ok(b"slow" if b"slow" in head else b"fast"))

    listener = await asyncio.start_server(slow_then_fast, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{listener.sockets[0].getsockname()[1]}/x"
    transport = PlainHTTPTransport()
    call = asyncio.ensure_future(transport.post(url, b"{}", {"X-Speed": "slow"}, 5.0))
    await asyncio.sleep(0.05)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert (await transport.post(url, b"{}", {"X-Speed": "fast"}, 5.0)).body == b"fast"
    await asyncio.sleep(0.4)  # the late "slow" reply would have been read as this one's
    assert (await transport.post(url, b"{}", {"X-Speed": "fast"}, 5.0)).body == b"fast"
    await transport.aclose()
    listener.close()


async def test_bad_header_values_are_one_line_errors_not_sent() -> None:
    server = RawServer(ok())
    transport = PlainHTTPTransport()
    async with raw_server(server) as url:
        for value in ("sk-abc\n", "sk-a\r\nX-Injected: 1", "sk-é"):
            with pytest.raises(TransportError, match="the Authorization header has a line break or a non-ASCII"):
                await transport.post(url, b"{}", {"Authorization": f"Bearer {value}"}, 5.0)
    await transport.aclose()
    assert server.requests == []


async def test_a_server_that_drops_the_request_is_an_error_not_a_hang() -> None:
    server = RawServer(None)  # reads the request, closes without a reply
    transport = PlainHTTPTransport()
    async with raw_server(server) as url:
        with pytest.raises(TransportError, match="closed the connection without a reply") as info:
            await transport.post(url, b"{}", {}, 5.0)
    await transport.aclose()
    assert not info.value.timeout and server.connections == 1  # a fresh connection is not retried


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"SSH-2.0-OpenSSH_9.2\r\n\r\n", "bad HTTP reply: not HTTP/1.x"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "bad HTTP reply"),
        (ok(b"\x00garbage", "Content-Encoding: br\r\n"), "'br'-encoded reply"),
        (ok(b"not gzip", "Content-Encoding: gzip\r\n"), "bad gzip reply body"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-1\r\n", "bad chunk size"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0x2\r\nab\r\n0\r\n\r\n", "bad chunk size"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabcd\r\n0\r\n\r\n", "not followed by CRLF"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: -5\r\n\r\n", "negative Content-Length"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", "closed the connection mid-reply"),
    ],
)
async def test_malformed_replies_are_one_line_errors(raw: bytes, message: str) -> None:
    transport = PlainHTTPTransport()
    async with raw_server(RawServer(raw, close_after=True)) as url:
        with pytest.raises(TransportError, match=message.replace("(", r"\(")) as info:
            await transport.post(url, b"{}", {}, 5.0)
    await transport.aclose()
    assert "\n" not in str(info.value)


async def test_no_reply_in_time_is_a_timeout() -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(-1)

    listener = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    transport = PlainHTTPTransport()
    with pytest.raises(TransportError, match=r"no reply within 0\.2 s") as info:
        await transport.post(f"http://127.0.0.1:{port}/x", b"{}", {}, 0.2)
    await transport.aclose()
    listener.close()
    assert info.value.timeout


async def test_connection_refused_and_unknown_host() -> None:
    with socket.socket() as probe:  # a port with nothing listening
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    transport = PlainHTTPTransport()
    with pytest.raises(TransportError, match=rf"connection refused \(127.0.0.1:{port}\)") as info:
        await transport.post(f"http://127.0.0.1:{port}/v1/chat/completions", b"{}", {}, 5.0)
    assert not info.value.timeout
    with pytest.raises(TransportError, match=rf"connection refused \(localhost:{port}\)"):  # ::1 and 127.0.0.1
        await transport.post(f"http://localhost:{port}/v1/chat/completions", b"{}", {}, 5.0)
    with pytest.raises(TransportError, match="bad port"):
        await transport.post("http://127.0.0.1:99999/v1/chat/completions", b"{}", {}, 5.0)
    with pytest.raises(TransportError, match="cannot resolve the host"):
        await transport.post("http://no-such-host.invalid/v1/chat/completions", b"{}", {}, 5.0)
    with pytest.raises(TransportError, match="not a plain http URL"):
        await transport.post("https://127.0.0.1/x", b"{}", {}, 5.0)


def test_one_transport_across_event_loops() -> None:
    """An Agent run twice (two asyncio.run calls) without aclose keeps working, and closes after."""
    transport = DefaultTransport()

    async def once() -> bytes:
        async with raw_server(RawServer(ok(b"hi"))) as url:
            return (await transport.post(url, b"{}", {}, 5.0)).body

    assert asyncio.run(once()) == b"hi"
    assert asyncio.run(once()) == b"hi"
    asyncio.run(transport.aclose())  # the pooled connection belongs to the closed loop: dropped, no error


async def test_routing_plain_http_https_proxies_and_redirects(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("http_proxy", "HTTP_PROXY", "no_proxy", "NO_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    transport = DefaultTransport()
    used: list[str] = []

    async def full(url: str, body: bytes, headers: object, timeout_s: float) -> object:
        used.append(url)
        return "aiohttp"

    monkeypatch.setattr(transport.full, "post", full)
    server = RawServer(
        ok(b"lean"),
        b"HTTP/1.1 302 Found\r\nLocation: /v2\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 308 Permanent Redirect\r\nLocation: /v2\r\nContent-Length: 0\r\n\r\n",
    )
    async with raw_server(server) as url:
        assert (await transport.post(url, b"{}", {}, 5.0)).body == b"lean"  # type: ignore[union-attr]
        assert (await transport.post(url, b"{}", {}, 5.0)).status == 302  # type: ignore[union-attr]
        assert await transport.post(url, b"{}", {}, 5.0) == "aiohttp"  # the redirect: aiohttp follows it
        assert await transport.post(url, b"{}", {}, 5.0) == "aiohttp"  # and keeps that URL from now on
        assert await transport.post("https://api.example.com/v1/chat/completions", b"{}", {}, 5.0) == "aiohttp"
        monkeypatch.setenv("HTTP_PROXY", "http://proxy.corp:3128")
        proxied = "http://gpu.example.com:8000/v1/chat/completions"
        assert await transport.post(proxied, b"{}", {}, 5.0) == "aiohttp"
    await transport.aclose()
    assert len(server.requests) == 3 and used == [url, url, "https://api.example.com/v1/chat/completions", proxied]


def test_the_lean_client_runs_under_uvloop() -> None:
    """uvloop's transports do not subclass asyncio.Transport; the client must not depend on that."""
    uvloop = pytest.importorskip("uvloop")  # a test dependency; skipped only where it cannot install
    transport = PlainHTTPTransport()

    async def twice() -> list[tuple[int, bytes]]:
        server = RawServer(ok(b"one"), ok(b"two"))
        async with raw_server(server) as url:
            replies = [(await transport.post(url, b"{}", {}, 5.0)).body for _ in range(2)]
            await transport.aclose()
        return [(number, body) for (number, _, _), body in zip(server.requests, replies, strict=True)]

    assert uvloop.run(twice()) == [(1, b"one"), (1, b"two")]  # one pooled connection, both replies
