"""A direct DevTools connection to a browser this process launched, for the per-step hot path.

Every Playwright call crosses two hops: Python to the Playwright driver (a Node.js process) and
the driver to Chromium. The session's own CDP session (``BrowserSession._cdp``) is instead a
flattened CDP session (``Target.attachToTarget``) on a WebSocket straight to Chromium's DevTools
port: the three commands of an agent step (the click, settle's check and the screenshot), and
what already went over that session (navigation events, file choosers, new-tab notices, the
navigation guard's ``Fetch`` interception). At 100 sessions on 2 cores that spares the driver's
CPU and most of Playwright's Python per call (``docs/benchmarks.md``). Contexts, pages,
``goto``, dialogs, the keyboard and the events Playwright reports stay Playwright's.

``launch_browser`` starts Chromium with ``--remote-debugging-port`` on a free 127.0.0.1 port and
connects right away, while the browser is idle (at 100 sessions a saturated browser can take
seconds to answer). Any failure (the port taken in the meantime, an old browser) leaves sessions
on Playwright's own CDP sessions, which offer the same ``send``/``on``/``detach``. ``browser.direct_cdp: false`` turns the port off, and so does a
``--remote-debugging-port`` or ``--remote-debugging-address`` in ``browser.args``. While a
browser runs, any local process may connect to the port, as to any remote-debugging port: an
``Agent`` with secrets configured leaves it off unless ``direct_cdp`` is set explicitly.

The WebSocket client is minimal on purpose: one text frame per command, written at once; replies
and events parsed as bytes arrive. Handlers registered with ``on`` must be plain functions.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import os
import socket
import weakref
from collections.abc import Callable
from typing import Any, Protocol

import structlog
from playwright.async_api import Browser, BrowserContext, Page
from playwright.async_api import Error as PlaywrightError

from .deadline import DEFAULT_COMMAND_TIMEOUT_S, CommandTimeout, on_wait_over, within

__all__ = [
    "CDPChannel",
    "DevTools",
    "DevToolsError",
    "DevToolsSession",
    "connect_devtools",
    "devtools_for",
    "free_port",
]

log = structlog.get_logger("webagent.browser")

CONNECT_TIMEOUT_S = 10.0
_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"  # RFC 6455's handshake constant
_CLOSED = "Target page, context or browser has been closed"  # what BrowserSession._target_closed looks for


class CDPChannel(Protocol):
    """What the session uses of a CDP session: Playwright's ``CDPSession`` or a ``DevToolsSession``."""

    async def send(self, method: str, params: dict[str, Any] | None = None, *, timeout_s: float | None = None) -> Any:
        """The command's reply; CommandTimeout past ``timeout_s`` (default: the channel's deadline)."""

    def on(self, event: str, f: Callable[..., Any]) -> None: ...
    async def detach(self) -> None: ...


class DevToolsError(PlaywrightError):
    """A command failed (a protocol error, a closed target or connection); a Playwright ``Error``,
    so callers handle it as they handle Playwright's."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


class DevToolsSession:
    """One page's flattened CDP session on a ``DevTools`` connection."""

    def __init__(self, devtools: DevTools, session_id: str) -> None:
        self._devtools = devtools
        self.session_id = session_id
        self._handlers: dict[str, list[Callable[[Any], Any]]] = {}
        self.closed = False  # no more commands: the target went away, it was detached, or the connection
        self.gone = False  # the target itself went away (the page closed)
        self.crashed = False  # its renderer died: commands would never be answered

    def request(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        *,
        flush: bool = True,
        timeout_s: float | None = None,
    ) -> asyncio.Future[Any]:
        """Send a command; its reply (the ``result`` object) is the future's, or CommandTimeout
        after ``timeout_s`` (default: the connection's). ``flush=False``: it goes out with the next
        command sent (one write for both), at the latest on the next loop turn."""
        if self.closed or self.crashed:
            future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            future.set_exception(DevToolsError(f"{method}: {'Target crashed' if self.crashed else _CLOSED}"))
            return future
        return self._devtools.request(method, params, self.session_id, flush=flush, timeout_s=timeout_s)

    async def send(self, method: str, params: dict[str, Any] | None = None, *, timeout_s: float | None = None) -> Any:
        return await self.request(method, params, timeout_s=timeout_s)

    def on(self, event: str, f: Callable[..., Any]) -> None:
        self._handlers.setdefault(event, []).append(f)

    async def click(self, x: float, y: float) -> None:
        """A left click as Playwright's ``mouse.click`` sends it (move, press, release), the three
        events written at once; done when the page has handled the release. Playwright's own idea
        of the mouse position is not updated: code that relies on it moves the mouse first."""
        base = {"x": x, "y": y, "modifiers": 0}
        move = {"type": "mouseMoved", "button": "none", "buttons": 0, **base}
        press = {"button": "left", "clickCount": 1, **base}
        for params in (move, {"type": "mousePressed", "buttons": 1, **press}):
            # Their failures (a closed page) are the release's too: read here, not left unretrieved.
            self.request("Input.dispatchMouseEvent", params, flush=False).add_done_callback(_retrieve)
        await self.request("Input.dispatchMouseEvent", {"type": "mouseReleased", "buttons": 0, **press})

    async def detach(self) -> None:
        if not self.closed:
            self._close(_CLOSED)
            with contextlib.suppress(PlaywrightError):  # DevToolsError, CommandTimeout
                await self._devtools.request("Target.detachFromTarget", {"sessionId": self.session_id})

    def _dispatch(self, method: str, params: Any) -> None:
        if method == "Inspector.targetCrashed":
            self.crashed = True
            self._devtools.fail_session(self.session_id, "Target crashed")
        elif method == "Inspector.targetReloadedAfterCrash":
            self.crashed = False
        for handler in self._handlers.get(method, ()):
            try:
                handler(params)
            except Exception:  # a handler's bug must not stop the connection's reader
                log.exception("devtools_handler_failed", cdp_event=method)

    def _close(self, reason: str) -> None:
        self.closed = True
        self._devtools.fail_session(self.session_id, reason)
        self._devtools.sessions.pop(self.session_id, None)


class DevTools(asyncio.Protocol):
    """One WebSocket connection to a browser's DevTools endpoint, shared by its sessions."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.sessions: dict[str, DevToolsSession] = {}
        #: Deadline of a command (``browser.command_timeout_s``): an unanswered one fails with CommandTimeout.
        self.timeout_s = DEFAULT_COMMAND_TIMEOUT_S
        self._pending: dict[int, _Pending] = {}
        self._next_id = 0
        self._buffer = bytearray()
        self._fragments = bytearray()
        self._handshake: asyncio.Future[None] | None = None
        self._key = b""
        self._out: list[bytes] = []  # frames of commands sent with flush=False, not written yet
        self._flush_soon = False
        self.closed = False

    # -- connecting -----------------------------------------------------------------------
    @classmethod
    async def connect(cls, host: str, port: int) -> DevTools:
        """Connect to the browser listening on ``host:port`` (``/json/version``, then its WebSocket)."""
        devtools: DevTools | None = None
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT_S):
                try:
                    info = await _get_json(host, port, "/json/version")
                except ConnectionRefusedError:  # not listening yet: once more, a moment later
                    await asyncio.sleep(0.2)
                    info = await _get_json(host, port, "/json/version")
                url = str(info["webSocketDebuggerUrl"])
                path = "/" + url.split("://", 1)[1].split("/", 1)[1]
                _, devtools = await asyncio.get_running_loop().create_connection(cls, host, port)
                await devtools._upgrade(host, port, path)
        except BaseException:
            if devtools is not None:
                devtools.close()
            raise
        return devtools

    async def _upgrade(self, host: str, port: int, path: str) -> None:
        assert self.transport is not None
        self._key = base64.b64encode(os.urandom(16))
        self._handshake = asyncio.get_running_loop().create_future()
        self.transport.write(
            f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {self._key.decode()}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode()
        )
        await self._handshake

    async def attach(self, context: BrowserContext, page: Page) -> DevToolsSession:
        """A CDP session of ``page`` on this connection (its target id asked of Playwright once)."""
        probe = await within(context.new_cdp_session(page), self.timeout_s, "new_cdp_session")
        try:
            info = await within(probe.send("Target.getTargetInfo"), self.timeout_s, "Target.getTargetInfo")
        finally:
            with contextlib.suppress(PlaywrightError):
                await within(probe.detach(), self.timeout_s, "CDPSession.detach")
        target = info["targetInfo"]["targetId"]
        reply = await self.request("Target.attachToTarget", {"targetId": target, "flatten": True})
        session = DevToolsSession(self, str(reply["sessionId"]))
        self.sessions[session.session_id] = session
        return session

    def close(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.close()
            self.connection_lost(None)  # closed now, even if asyncio reports it later (or never)

    # -- commands -------------------------------------------------------------------------
    def request(
        self,
        method: str,
        params: dict[str, Any] | None,
        session_id: str | None = None,
        *,
        flush: bool = True,
        timeout_s: float | None = None,
    ) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        if self.closed or self.transport is None:
            future.set_exception(DevToolsError(f"{method}: {_CLOSED}"))
            return future
        self._next_id += 1
        key = self._next_id
        message: dict[str, Any] = {"id": key, "method": method, "params": params or {}}
        if session_id is not None:
            message["sessionId"] = session_id
        seconds = timeout_s or self.timeout_s
        hook = on_wait_over.get()
        if hook is not None:  # answered or past its deadline: the run's progress (deadline.waited)
            future.add_done_callback(lambda done: None if done.cancelled() else hook())
        timer = loop.call_later(seconds, self._expire, key, seconds)
        self._pending[key] = _Pending(future, method, session_id, timer)
        self._out.append(_frame(json.dumps(message, separators=(",", ":")).encode()))
        if flush:
            self._flush()
        elif not self._flush_soon:  # nothing else may follow: out on the next loop turn anyway
            self._flush_soon = True
            loop.call_soon(self._flush)
        return future

    def _flush(self) -> None:
        """Write the frames waiting (one system call: each write wakes the browser's I/O thread)."""
        self._flush_soon = False
        if self._out and self.transport is not None and not self.closed:
            self.transport.write(b"".join(self._out))
        self._out.clear()

    def _expire(self, key: int, seconds: float) -> None:
        """A command's deadline passed: its reply, should it still come, is ignored."""
        entry = self._pending.pop(key, None)
        if entry is not None:
            entry.fail(CommandTimeout(f"{entry.method}: no answer from the browser within {seconds:g} s"))

    def fail_session(self, session_id: str, reason: str) -> None:
        """Fail the commands of one session still waiting for a reply (its target closed or crashed)."""
        for key, entry in list(self._pending.items()):
            if entry.session_id == session_id:
                del self._pending[key]
                entry.fail(DevToolsError(f"{entry.method}: {reason}"))

    # -- asyncio.Protocol -----------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # a stream transport (uvloop's too)

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        try:
            handshake = self._handshake
            if handshake is not None and not handshake.done() and not self._read_handshake():
                return
            self._read_frames()
        except Exception as exc:  # a bad frame or message: sessions fall back to Playwright's
            log.warning("devtools_protocol_error", error=str(exc) or type(exc).__name__)
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._handshake is not None and not self._handshake.done():
            self._handshake.set_exception(ConnectionError("the DevTools connection closed during the handshake"))
        pending, self._pending = self._pending, {}
        for entry in pending.values():
            entry.fail(DevToolsError(f"{entry.method}: {_CLOSED}"))
        for session in list(self.sessions.values()):
            session.closed = True
        self.sessions.clear()

    # -- the wire -------------------------------------------------------------------------
    def _read_handshake(self) -> bool:
        end = self._buffer.find(b"\r\n\r\n")
        if end < 0:
            return False
        head = bytes(self._buffer[:end]).decode("latin-1").split("\r\n")
        del self._buffer[: end + 4]
        assert self._handshake is not None
        accept = base64.b64encode(hashlib.sha1(self._key + _GUID).digest()).decode()
        if " 101 " not in head[0] + " " or _fields(head).get("sec-websocket-accept") != accept:
            self._handshake.set_exception(ConnectionError(f"not a DevTools WebSocket: {head[0]}"))
            self.close()
            return False
        self._handshake.set_result(None)
        return True

    def _read_frames(self) -> None:
        buf = self._buffer
        while len(buf) >= 2:
            first, second = buf[0], buf[1]
            size, start = second & 0x7F, 2
            if size == 126:
                if len(buf) < 4:
                    return
                size, start = int.from_bytes(buf[2:4], "big"), 4
            elif size == 127:
                if len(buf) < 10:
                    return
                size, start = int.from_bytes(buf[2:10], "big"), 10
            mask = b""
            if second & 0x80:  # servers do not mask; tolerated anyway
                mask, start = bytes(buf[start : start + 4]), start + 4
            if len(buf) < start + size:
                return
            payload = bytes(buf[start : start + size])
            del buf[: start + size]
            if mask:
                payload = _xor(payload, mask)
            self._on_frame(first & 0x0F, bool(first & 0x80), payload)

    def _on_frame(self, opcode: int, fin: bool, payload: bytes) -> None:
        if opcode in (0x0, 0x1, 0x2):  # continuation, text, binary
            if not fin or self._fragments:
                self._fragments += payload
                if not fin:
                    return
                payload, self._fragments = bytes(self._fragments), bytearray()
            self._on_message(payload)
        elif opcode == 0x9 and self.transport is not None:  # ping
            self.transport.write(_frame(payload, opcode=0xA))
        elif opcode == 0x8:  # close
            self.close()

    def _on_message(self, payload: bytes) -> None:
        message = json.loads(payload)
        key = message.get("id")
        if key is not None:
            entry = self._pending.pop(key, None)
            if entry is not None:
                error = message.get("error")
                if error is not None:
                    # -32001: "Session with given id not found" (its target closed in the meantime)
                    reason = _CLOSED if error.get("code") == -32001 else error.get("message", error)
                    entry.fail(DevToolsError(f"{entry.method}: {reason}"))
                else:
                    entry.timer.cancel()
                    if not entry.future.done():
                        entry.future.set_result(message.get("result", {}))
            return
        method, params = message.get("method", ""), message.get("params", {})
        session = self.sessions.get(message.get("sessionId", ""))
        if session is not None:
            session._dispatch(method, params)
        elif method == "Target.detachedFromTarget":
            gone = self.sessions.get(params.get("sessionId", ""))
            if gone is not None:
                gone.gone = True
                gone._close(_CLOSED)


class _Pending:
    """A command waiting for its reply, and the timer of its deadline."""

    __slots__ = ("future", "method", "session_id", "timer")

    def __init__(
        self, future: asyncio.Future[Any], method: str, session_id: str | None, timer: asyncio.TimerHandle
    ) -> None:
        self.future = future
        self.method = method
        self.session_id = session_id
        self.timer = timer

    def fail(self, exc: Exception) -> None:
        self.timer.cancel()
        if not self.future.done():
            self.future.set_exception(exc)


def _fields(head: list[str]) -> dict[str, str]:
    """The header fields of an HTTP head's lines (status line first), names lowercased."""
    return {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in head[1:])}


def _retrieve(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


def _frame(payload: bytes, opcode: int = 0x1) -> bytes:
    """A final, masked client frame (RFC 6455 requires clients to mask)."""
    size = len(payload)
    if size < 126:
        head = bytes((0x80 | opcode, 0x80 | size))
    elif size < 1 << 16:
        head = bytes((0x80 | opcode, 0x80 | 126)) + size.to_bytes(2, "big")
    else:
        head = bytes((0x80 | opcode, 0x80 | 127)) + size.to_bytes(8, "big")
    mask = os.urandom(4)
    return head + mask + _xor(payload, mask)


def _xor(payload: bytes, mask: bytes) -> bytes:
    size = len(payload)
    if not size:
        return payload
    key = (mask * (size // 4 + 1))[:size]
    return (int.from_bytes(payload, "big") ^ int.from_bytes(key, "big")).to_bytes(size, "big")


async def _get_json(host: str, port: int, path: str) -> Any:
    """GET a JSON document of the DevTools HTTP server (which keeps the connection open)."""
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
        head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        if " 200 " not in head[0] + " ":
            raise ConnectionError(f"GET {path}: {head[0]}")
        body = await reader.readexactly(int(_fields(head)["content-length"]))
    finally:
        writer.close()
    return json.loads(body)


# -- which browser has one ------------------------------------------------------------------------
_CONNECTIONS: weakref.WeakKeyDictionary[Browser, DevTools] = weakref.WeakKeyDictionary()


async def connect_devtools(
    browser: Browser, host: str, port: int, *, timeout_s: float = DEFAULT_COMMAND_TIMEOUT_S
) -> DevTools | None:
    """Open ``browser``'s direct connection (right after launch, while the browser is idle); None,
    logged, where it cannot be had: sessions on that browser then use Playwright's CDP sessions.
    ``timeout_s``: the deadline of each command sent over it."""
    try:
        devtools = await DevTools.connect(host, port)
    except Exception as exc:  # whatever answers there, it is not usable: Playwright's sessions then
        log.info("devtools_unavailable", port=port, error=str(exc) or type(exc).__name__)
        return None
    devtools.timeout_s = timeout_s
    _CONNECTIONS[browser] = devtools
    browser.on("disconnected", lambda _: devtools.close())
    return devtools


def devtools_for(browser: Browser | None) -> DevTools | None:
    """The direct connection to ``browser``, or None where there is none (or no more)."""
    devtools = _CONNECTIONS.get(browser) if browser is not None else None
    return None if devtools is None or devtools.closed else devtools
