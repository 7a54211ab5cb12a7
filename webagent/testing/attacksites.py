"""Attack pages for the navigation guard: an allowed site, a forbidden one, one page per channel.

``AttackSites`` serves, from a background thread, on 127.0.0.1:

* the **allowed** site (one HTTP port, reached as ``shop.test`` and, for cross-site frames,
  ``ads.test``): ``/attack/<name>?target=host|private`` is the page of one attack of
  :data:`ATTACKS`, ``/redirect?status=302&to=URL`` a redirect with CORS headers,
  ``/worker.js`` the script of its workers, ``/frame`` a cross-site frame's page, and
  ``/done?attack=...`` the beacon each attack page sends when its attack is over;
* the **forbidden** endpoints, which record everything they receive (:attr:`AttackSites.hits`):
  an HTTP server (answering every request, WebSocket handshakes included, with permissive CORS
  headers), a TCP port (TLS for ``https`` URLs, TURN over TCP) and a UDP port (STUN, TURN,
  QUIC). The STUN/TURN answers ask for credentials (401 with a realm and nonce), so a TURN
  client sends its USERNAME next, as a real server would make it.

Browsers reach the names through Chromium's ``--host-resolver-rules`` (:meth:`AttackSites.browser_args`,
which also makes the allowed origins secure contexts, as WebTransport, PaymentRequest and FedCM
need). The forbidden target is ``evil.test`` (``target=host``: a host outside an allow-list) or
``127.0.0.1`` (``target=private``: what ``private_network`` refuses); ``shop.test`` looks public.

An attack runs when its page loads, or, with ``secret=1``, when the button is clicked: it then
sends the value of the password field (a secret the agent typed) through its channel.
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self, cast

from aiohttp import web

from .attackpages import (
    ALLOWED_HOST,
    ATTACKS,
    FORBIDDEN_HOST,
    FRAME_HOST,
    SECRET_BUTTON,
    SECRET_FIELD,
    Attack,
    Target,
    render_frame,
    render_page,
    render_worker,
)

__all__ = [
    "ALLOWED_HOST",
    "ATTACKS",
    "FORBIDDEN_HOST",
    "FRAME_HOST",
    "SECRET_BUTTON",
    "SECRET_FIELD",
    "Attack",
    "AttackSites",
    "Hit",
]


@dataclass(frozen=True)
class Hit:
    """Something a forbidden endpoint received: ``channel`` is http, tcp or udp."""

    channel: str
    what: str  # the request line, or the first bytes
    data: bytes  # everything received (headers and body for HTTP)


class AttackSites:
    """The allowed site and the forbidden endpoints (see the module docstring), on 127.0.0.1."""

    def __init__(self) -> None:
        self._hits: list[Hit] = []
        self._done: dict[str, list[str]] = {}
        self._lock = threading.RLock()  # a predicate of wait() may read hits
        self._changed = threading.Condition(self._lock)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stop: asyncio.Event | None = None
        self.allowed_port = self.forbidden_port = self.tcp_port = self.udp_port = 0

    # -- what the tests use ----------------------------------------------------------------
    def browser_args(self) -> list[str]:
        """Chromium flags: the test names resolve to 127.0.0.1, the allowed origins are secure contexts."""
        origins = ",".join(f"http://{h}:{self.allowed_port}" for h in (ALLOWED_HOST, FRAME_HOST))
        return ["--host-resolver-rules=MAP *.test 127.0.0.1", f"--unsafely-treat-insecure-origin-as-secure={origins}"]

    @property
    def origin(self) -> str:
        return f"http://{ALLOWED_HOST}:{self.allowed_port}"

    def url(self, attack: str, *, target: Target = "host", secret: bool = False) -> str:
        """The page of ``attack`` (a name of :data:`ATTACKS`) on the allowed site."""
        if attack not in ATTACKS:
            raise KeyError(attack)
        return f"{self.origin}/attack/{attack}?target={target}" + ("&secret=1" if secret else "")

    def forbidden(self, target: Target) -> dict[str, str]:
        """The forbidden endpoints as the pages name them."""
        host = FORBIDDEN_HOST if target == "host" else "127.0.0.1"
        same_site = f"evil.{ALLOWED_HOST}" if target == "host" else "127.0.0.1"
        return {
            "http": f"http://{host}:{self.forbidden_port}",
            "ws": f"ws://{host}:{self.forbidden_port}",
            "https": f"https://{host}:{self.tcp_port}",
            "quic": f"https://{host}:{self.udp_port}",
            "udp": f"127.0.0.1:{self.udp_port}",  # WebRTC resolves no name for UDP under the resolver rules
            "tcp": f"{host}:{self.tcp_port}",
            "sameSite": f"http://{same_site}:{self.forbidden_port}",
            "frame": f"http://{FRAME_HOST}:{self.allowed_port}",
        }

    @property
    def hits(self) -> list[Hit]:
        """What the forbidden endpoints received so far."""
        with self._lock:
            return list(self._hits)

    def results(self, attack: str) -> list[str]:
        """The results the page of ``attack`` reported so far (one per run)."""
        with self._lock:
            return list(self._done.get(attack, []))

    def clear(self) -> None:
        with self._lock:
            self._hits.clear()
            self._done.clear()

    def wait(self, predicate: Callable[[], bool], timeout_s: float) -> bool:
        """Block until ``predicate()`` holds (checked at each hit or report), at most ``timeout_s``."""
        with self._changed:
            return self._changed.wait_for(predicate, timeout_s)

    async def wait_done(self, attack: str, timeout_s: float = 30.0) -> str | None:
        """The result ``attack``'s page reported first since ``clear()`` (None if none came in time)."""
        ok = await asyncio.to_thread(self.wait, lambda: bool(self._done.get(attack)), timeout_s)
        return self.results(attack)[0] if ok else None

    async def wait_hit(self, timeout_s: float = 30.0) -> bool:
        """Whether a forbidden endpoint receives something within ``timeout_s``."""
        return await asyncio.to_thread(self.wait, lambda: bool(self._hits), timeout_s)

    def _record(self, hit: Hit) -> None:
        with self._changed:
            self._hits.append(hit)
            self._changed.notify_all()

    def _report(self, attack: str, result: str) -> None:
        with self._changed:
            self._done.setdefault(attack, []).append(result)
            self._changed.notify_all()

    # -- the allowed site ------------------------------------------------------------------
    async def _allowed(self, request: web.Request) -> web.StreamResponse:
        cors = {"Access-Control-Allow-Origin": request.headers.get("Origin", "*"), "Cache-Control": "no-store"}
        query = request.query
        target: Target = "private" if query.get("target") == "private" else "host"
        path = request.path
        if path.startswith("/attack/") and path[8:] in ATTACKS:
            page = render_page(ATTACKS[path[8:]], self.forbidden(target), target, on_click=bool(query.get("secret")))
            return web.Response(text=page, content_type="text/html", headers=cors)
        if path == "/redirect":
            headers = {**cors, "Location": query.get("to", "/")}
            return web.Response(status=int(query.get("status", "302")), headers=headers)
        if path == "/worker.js":
            script = render_worker(self.forbidden(target), query.get("job", ""), query.get("s", ""))
            return web.Response(text=script, content_type="text/javascript", headers=cors)
        if path == "/frame":
            page = render_frame(self.forbidden(target), query.get("job", ""))
            return web.Response(text=page, content_type="text/html", headers=cors)
        if path == "/done":
            self._report(query.get("attack", ""), query.get("result", ""))
            return web.Response(text="ok", headers=cors)
        body = f"<!doctype html><title>allowed</title><h1>Allowed page {html.escape(path)}</h1>"
        return web.Response(text=body, content_type="text/html", headers=cors)

    # -- the forbidden endpoints -----------------------------------------------------------
    async def _forbidden_http(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        head = f"{request.method} {request.path_qs} HTTP/1.1\r\n" + "".join(
            f"{k}: {v}\r\n" for k, v in request.headers.items()
        )
        self._record(Hit("http", f"{request.method} {request.host}{request.path_qs}", head.encode() + b"\r\n" + body))
        headers = {
            "Access-Control-Allow-Origin": request.headers.get("Origin", "*"),
            "Access-Control-Allow-Credentials": "true",
            "Supports-Loading-Mode": "credentialed-prerender",
            "Cache-Control": "no-store",
        }
        if request.path == "/events":
            return web.Response(text="data: forbidden reply\n\n", content_type="text/event-stream", headers=headers)
        return web.Response(text="forbidden reply", content_type="text/plain", headers=headers)

    async def _forbidden_tcp(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        received = b""
        try:
            while len(received) < 65536:
                chunk = await asyncio.wait_for(reader.read(4096), 3.0)
                if not chunk:
                    break
                if not received:
                    self._record(Hit("tcp", chunk[:40].hex(), chunk))
                else:
                    self._record(Hit("tcp", "more", chunk))
                received += chunk
                reply = _stun_reply(chunk)
                if reply:
                    writer.write(reply)
                    await writer.drain()
        except (TimeoutError, ConnectionError):
            pass
        finally:
            if not received:
                self._record(Hit("tcp", "connection", b""))
            writer.close()

    def _forbidden_udp(self, data: bytes, addr: tuple[str, int], transport: asyncio.DatagramTransport) -> None:
        self._record(Hit("udp", data[:40].hex(), data))
        reply = _stun_reply(data)
        if reply:
            transport.sendto(reply, addr)

    # -- running -----------------------------------------------------------------------------
    def start(self) -> Self:
        ready = threading.Event()
        failure: list[BaseException] = []

        def serve() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                loop.run_until_complete(self._serve(ready))
            except BaseException as exc:  # a failed start is raised in start()
                failure.append(exc)
                ready.set()
            finally:
                loop.close()

        self._thread = threading.Thread(target=serve, name="webagent-attack-sites", daemon=True)
        self._thread.start()
        ready.wait(30)
        if failure:
            raise failure[0]
        return self

    async def _serve(self, ready: threading.Event) -> None:
        self._stop = asyncio.Event()
        runners = []
        ports = []
        for handler in (self._allowed, self._forbidden_http):
            app = web.Application()
            app.router.add_route("*", "/{tail:.*}", handler)
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            runners.append(runner)
            ports.append(runner.addresses[0][1])
        tcp = await asyncio.start_server(self._forbidden_tcp, "127.0.0.1", 0)
        loop = asyncio.get_running_loop()
        udp, _ = await loop.create_datagram_endpoint(lambda: _Datagrams(self), local_addr=("127.0.0.1", 0))
        self.allowed_port, self.forbidden_port = ports
        self.tcp_port = tcp.sockets[0].getsockname()[1]
        self.udp_port = udp.get_extra_info("sockname")[1]
        ready.set()
        try:
            await self._stop.wait()
        finally:
            udp.close()
            tcp.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(tcp.wait_closed(), 2)
            for runner in runners:
                await runner.cleanup()

    def stop(self) -> None:
        loop, stop, thread = self._loop, self._stop, self._thread
        if loop is not None and stop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(stop.set)
        if thread is not None:
            thread.join(10)
        self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


class _Datagrams(asyncio.DatagramProtocol):
    def __init__(self, sites: AttackSites) -> None:
        self._sites = sites
        self._transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[str | Any, int]) -> None:
        if self._transport is not None:
            self._sites._forbidden_udp(data, addr, self._transport)


_COOKIE = 0x2112A442


def _stun_reply(data: bytes) -> bytes | None:
    """A STUN/TURN server's answer to a request: a binding response, or 401 (realm and nonce) to
    an Allocate, so that the client sends its credentials next, as with a real TURN server."""
    if len(data) < 20:
        return None
    kind, _, cookie = struct.unpack("!HHI", data[:8])
    if cookie != _COOKIE or kind & 0x0110:  # not a request
        return None
    txid = data[8:20]
    method = kind & 0x3EEF
    if method == 0x0001:  # Binding: a success response without attributes
        return struct.pack("!HHI", 0x0101, 0, _COOKIE) + txid
    if method != 0x0003:  # only Allocate is answered besides
        return None

    def attr(kind: int, value: bytes) -> bytes:
        pad = b"\0" * (-len(value) % 4)
        return struct.pack("!HH", kind, len(value)) + value + pad

    attrs = attr(0x0009, b"\0\0\x04\x01Unauthorized") + attr(0x0014, b"evil") + attr(0x0015, b"0123456789abcdef")
    return struct.pack("!HHI", 0x0113, len(attrs), _COOKIE) + txid + attrs
