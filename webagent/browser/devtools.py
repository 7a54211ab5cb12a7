"""A direct DevTools connection to a browser this process launched, for the per-step hot path.

Every Playwright call crosses two hops: Python to the Playwright driver (a Node.js process) and
the driver to Chromium. The session's own CDP session (``PageState.cdp``) is instead a
flattened CDP session (``Target.attachToTarget``) on a WebSocket straight to Chromium's DevTools
port: the three commands of an agent step (the click, settle's check and the screenshot), and
what already went over that session (navigation events, file choosers, new-tab notices, the
navigation guard's ``Fetch`` interception). At 100 sessions on 2 cores that spares the driver's
CPU and most of Playwright's Python per call (``docs/benchmarks.md``, "Throughput on a light
page"; the measurement: ``docs/benchmarks-history.md``, 2026-11-22). Contexts, pages, ``goto``,
dialogs, the keyboard and the events Playwright reports stay Playwright's.

``launch_browser`` starts Chromium with ``--remote-debugging-port`` on a free 127.0.0.1 port and
connects right away, while the browser is idle (at 100 sessions a saturated browser can take
seconds to answer). Any failure (the port taken in the meantime, an old browser) leaves sessions
on Playwright's own CDP sessions, which offer the same ``send``/``on``/``detach``. ``browser.direct_cdp: false`` turns the port off, and so does a
``--remote-debugging-port`` or ``--remote-debugging-address`` in ``browser.args``. While a
browser runs, any local process may connect to the port, as to any remote-debugging port: an
``Agent`` with secrets configured leaves it off unless ``direct_cdp`` is set explicitly.

The WebSocket itself is aiohttp's (``ClientSession.ws_connect``: handshake, framing, masking,
pings, closing); this module keeps the CDP part: command ids, replies, deadlines, flattened
sessions and their events. A reader task dispatches each message as it arrives (handlers
registered with ``on`` must be plain functions); a writer task sends the commands of a loop turn
right after it, one text frame each, corked (``TCP_CORK``) while there are several: the kernel sends
them in one segment and wakes the browser once, not once a frame (at 100 sessions a turn holds about
four; each wake-up of a busy browser costs this process its core for a while).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import weakref
from collections.abc import Callable
from typing import Any

import aiohttp
import structlog
from playwright.async_api import Browser, BrowserContext, Page
from playwright.async_api import Error as PlaywrightError

from .deadline import DEFAULT_COMMAND_TIMEOUT_S, CommandTimeout, browser_load, on_wait_over, within
from .devsession import CLOSED, DevToolsError, DevToolsSession, retrieve
from .load import BrowserLoad

__all__ = [
    "DevTools",
    "connect_devtools",
    "devtools_for",
    "free_port",
]

log = structlog.get_logger("webagent.browser")

CONNECT_TIMEOUT_S = 10.0
CLOSE_TIMEOUT_S = 2.0  # for the closing handshake, after close() has failed every command waiting
MAX_MESSAGE = 256 * 1024 * 1024  # a full-page screenshot can be tens of MB (Playwright's own limit)
_CLOSING: set[asyncio.Task[None]] = set()
#: Whether a batch of several commands is corked (``DevTools._write``); a constant for the benchmark's A/B.
CORK = hasattr(socket, "TCP_CORK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


class DevTools:
    """One WebSocket connection to a browser's DevTools endpoint, shared by its sessions."""

    def __init__(self, http: aiohttp.ClientSession, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.sessions: dict[str, DevToolsSession] = {}
        self._root_handlers: dict[str, list[Callable[[Any], Any]]] = {}
        #: Deadline of a command (``browser.command_timeout_s``): an unanswered one fails with CommandTimeout.
        self.timeout_s = DEFAULT_COMMAND_TIMEOUT_S
        self.closed = False
        #: Replies from the browser so far (whether it still answers at all).
        self.replies = 0
        self._http = http
        self._ws = ws
        self._pending: dict[int, _Pending] = {}
        self._next_id = 0
        self._out: list[str] = []  # commands not written yet
        #: The connection's socket, corked around a batch of several frames (None: not a TCP socket).
        self._socket: Any = ws.get_extra_info("socket") if CORK else None
        self._writer: asyncio.Task[None] | None = None
        self._closer: asyncio.Task[None] | None = None
        self._reader = asyncio.get_running_loop().create_task(self._read())
        #: Target ids asked of Playwright ahead of ``attach`` (``prefetch_target``), by page.
        self._targets: weakref.WeakKeyDictionary[Page, asyncio.Task[dict[str, Any]]] = weakref.WeakKeyDictionary()

    # -- connecting -----------------------------------------------------------------------
    @classmethod
    async def connect(cls, host: str, port: int) -> DevTools:
        """Connect to the browser listening on ``host:port`` (``/json/version``, then its WebSocket)."""
        # No proxies (trust_env off) and no pooling: one connection for the version, one for the socket.
        http = aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True))
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT_S):
                try:
                    info = await _get_json(http, host, port, "/json/version")
                except aiohttp.ClientConnectorError:  # not listening yet: once more, a moment later
                    await asyncio.sleep(0.2)
                    info = await _get_json(http, host, port, "/json/version")
                # The socket's path, on the address we were given (not the one the browser names).
                path = "/" + str(info["webSocketDebuggerUrl"]).split("://", 1)[1].split("/", 1)[1]
                ws = await http.ws_connect(
                    f"ws://{host}:{port}{path}",
                    max_msg_size=MAX_MESSAGE,
                    compress=0,  # loopback: deflating screenshots would only cost CPU
                    # No heartbeat: a browser busy with 100 sessions can take seconds to answer a
                    # ping, and a browser that stops answering is caught by each command's deadline.
                    # Pings from the browser are answered (autoping).
                    heartbeat=None,
                    autoping=True,
                    timeout=aiohttp.ClientWSTimeout(ws_receive=None, ws_close=CLOSE_TIMEOUT_S),
                )
        except BaseException:
            await http.close()
            raise
        return cls(http, ws)

    async def target_info(self, context: BrowserContext, page: Page) -> dict[str, Any]:
        """``page``'s CDP ``TargetInfo`` (its target and browser context ids), asked of Playwright."""
        probe = await within(context.new_cdp_session(page), self.timeout_s, "new_cdp_session")
        try:
            info = await within(probe.send("Target.getTargetInfo"), self.timeout_s, "Target.getTargetInfo")
        finally:
            with contextlib.suppress(PlaywrightError):
                await within(probe.detach(), self.timeout_s, "CDPSession.detach")
        return dict(info["targetInfo"])

    def prefetch_target(self, context: BrowserContext, page: Page) -> None:
        """Ask Playwright for ``page``'s target id now, in the background, for a later ``attach``:
        three round trips through its driver (its CDP session, ``Target.getTargetInfo``, the detach),
        12 of the first screenshot's 14 s at 500 sessions beside 4 hogs, hidden behind the page's
        first load. Should that fail (its deadline ran during the load), ``attach`` asks once more."""
        if page not in self._targets:
            task = asyncio.ensure_future(self.target_info(context, page))
            task.add_done_callback(retrieve)
            self._targets[page] = task

    def forget_target(self, page: Page) -> None:
        """Drop (and stop) a target id asked ahead for ``page``, closed before it was attached."""
        task = self._targets.pop(page, None)
        if task is not None:
            task.cancel()

    async def attach(self, context: BrowserContext, page: Page) -> DevToolsSession:
        """A CDP session of ``page`` on this connection (its target id asked of Playwright once,
        ahead of time when ``prefetch_target`` was called)."""
        ahead = self._targets.pop(page, None)
        try:
            info = await ahead if ahead is not None else await self.target_info(context, page)
        except PlaywrightError:
            if ahead is None:
                raise
            info = await self.target_info(context, page)  # asked ahead, during a slow load: once more now
        reply = await self.request("Target.attachToTarget", {"targetId": info["targetId"], "flatten": True})
        return self.adopt(str(reply["sessionId"]))

    def adopt(self, session_id: str) -> DevToolsSession:
        """The session ``session_id`` (attached by this connection: ``Target.attachToTarget``, or
        auto-attached), its events dispatched from now on. Called as its ``attachedToTarget``
        event is handled, before the session's own messages are read."""
        session = self.sessions.get(session_id)
        if session is None:
            session = self.sessions[session_id] = DevToolsSession(self, session_id)
        return session

    def on(self, event: str, f: Callable[[Any], Any]) -> None:
        """Handle ``event`` of the browser target itself (messages without a session)."""
        self._root_handlers.setdefault(event, []).append(f)

    def close(self) -> None:
        """Closed now: every command waiting fails and its sessions are closed. The socket's closing
        handshake follows in the background, for at most ``CLOSE_TIMEOUT_S``."""
        self._lost()
        if self._closer is None:
            self._closer = asyncio.get_running_loop().create_task(self._shutdown())
            _CLOSING.add(self._closer)  # kept to its end, even once nothing else refers to this connection
            self._closer.add_done_callback(_CLOSING.discard)

    async def _shutdown(self) -> None:
        try:
            for task in (self._reader, self._writer):
                if task is not None and task is not asyncio.current_task():
                    task.cancel()
                    await asyncio.wait([task])
            async with asyncio.timeout(CLOSE_TIMEOUT_S):
                await self._ws.close()  # cancelled past its deadline: the connection is dropped
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            log.debug("devtools_close_failed", error=str(exc) or type(exc).__name__)
        finally:
            await self._http.close()

    # -- commands -------------------------------------------------------------------------
    def request(
        self,
        method: str,
        params: dict[str, Any] | None,
        session_id: str | None = None,
        *,
        timeout_s: float | None = None,
    ) -> asyncio.Future[Any]:
        """Send a command; its reply (the ``result`` object) is the future's, or CommandTimeout
        after ``timeout_s`` (default: ``timeout_s`` of the connection). The writer task sends it
        right after the current loop turn, with (and in the order of) the others of that turn."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        if self.closed:
            future.set_exception(DevToolsError(f"{method}: {CLOSED}"))
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
        self._pending[key] = _Pending(future, method, session_id, timer, seconds, browser_load.get(), self.replies)
        self._out.append(json.dumps(message, separators=(",", ":")))
        if self._writer is None or self._writer.done():
            self._writer = loop.create_task(self._write())
        return future

    async def _write(self) -> None:
        """Send the commands waiting, until there are none (one writer: they go out in order)."""
        try:
            while self._out and not self.closed:
                batch, self._out = self._out, []
                corked = len(batch) > 1 and self._cork(True)
                try:
                    for text in batch:
                        await self._ws.send_str(text)
                finally:
                    if corked:
                        self._cork(False)
        except (aiohttp.ClientError, OSError, RuntimeError) as exc:  # the socket is closing or gone
            log.debug("devtools_write_failed", error=str(exc) or type(exc).__name__)
            self.close()

    def _cork(self, on: bool) -> bool:
        """Hold (or let go) the socket's partial frames; False where the socket does not allow it."""
        if self._socket is None:
            return False
        try:
            self._socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, int(on))
        except OSError:  # closed meanwhile, or not TCP: sent frame by frame
            self._socket = None
            return False
        return True

    def _expire(self, key: int, seconds: float) -> None:
        """A command's deadline passed: more time on a saturated machine where this browser still
        answers (``BrowserLoad.grace``), else it fails and its reply, should it still come, is ignored."""
        entry = self._pending.get(key)
        if entry is None:
            return
        load = entry.load if not entry.future.done() else None  # None: no one waits for it any more
        if load is not None:
            more = load.grace(entry.sent, seconds, browser_answered=self.replies > entry.replies_before)
            if more > 0:
                entry.timer = asyncio.get_running_loop().call_later(more, self._expire, key, seconds)
                return
        del self._pending[key]
        note = ""
        if load is not None:
            waited_s = load.now() - entry.sent
            load.expire(waited_s, seconds)
            if waited_s >= 1.5 * seconds:
                note = f" (waited {waited_s:.0f} s: the machine is saturated)"
        entry.fail(CommandTimeout(f"{entry.method}: no answer from the browser within {seconds:g} s{note}"))

    def fail_session(self, session_id: str, reason: str) -> None:
        """Fail the commands of one session still waiting for a reply (its target closed or crashed)."""
        for key, entry in list(self._pending.items()):
            if entry.session_id == session_id:
                del self._pending[key]
                entry.fail(DevToolsError(f"{entry.method}: {reason}"))

    def _lost(self) -> None:
        """No more commands: every one waiting fails, and every session is closed."""
        self.closed = True
        self._out.clear()
        pending, self._pending = self._pending, {}
        for entry in pending.values():
            entry.fail(DevToolsError(f"{entry.method}: {CLOSED}"))
        for session in list(self.sessions.values()):
            session.closed = True
        self.sessions.clear()

    # -- replies and events ---------------------------------------------------------------
    async def _read(self) -> None:
        try:
            async for message in self._ws:  # until the socket closes
                if message.type is aiohttp.WSMsgType.ERROR:  # too big, bad frame: sessions fall back to Playwright's
                    log.warning("devtools_protocol_error", error=str(message.data) or type(message.data).__name__)
                    break
                try:
                    self._on_message(message.data)
                except Exception as exc:  # a bad message: sessions fall back to Playwright's
                    log.warning("devtools_protocol_error", error=str(exc) or type(exc).__name__)
                    break
        finally:
            self.close()

    def _on_message(self, payload: str | bytes) -> None:
        message = json.loads(payload)
        key = message.get("id")
        if key is not None:
            self.replies += 1
            entry = self._pending.pop(key, None)
            if entry is not None:
                if entry.load is not None:
                    entry.load.answer(entry.load.now() - entry.sent, entry.seconds)
                error = message.get("error")
                if error is not None:
                    # -32001: "Session with given id not found" (its target closed in the meantime)
                    reason = CLOSED if error.get("code") == -32001 else error.get("message", error)
                    entry.fail(DevToolsError(f"{entry.method}: {reason}"))
                else:
                    entry.timer.cancel()
                    if not entry.future.done():
                        entry.future.set_result(message.get("result", {}))
            return
        method, params = message.get("method", ""), message.get("params", {})
        session_id = message.get("sessionId")
        session = self.sessions.get(session_id or "")
        if session is not None:
            session.dispatch(method, params)
        elif session_id is None:
            for handler in self._root_handlers.get(method, ()):
                try:
                    handler(params)
                except Exception:  # a handler's bug must not stop the connection's reader
                    log.exception("devtools_handler_failed", cdp_event=method)
        if method == "Target.detachedFromTarget":  # a session of ours, or a child of one, went away
            gone = self.sessions.get(params.get("sessionId", ""))
            if gone is not None:
                gone.gone = True
                gone.end(CLOSED)


class _Pending:
    """A command waiting for its reply, the timer of its deadline, and what measures the load."""

    __slots__ = ("future", "load", "method", "replies_before", "seconds", "sent", "session_id", "timer")

    def __init__(
        self,
        future: asyncio.Future[Any],
        method: str,
        session_id: str | None,
        timer: asyncio.TimerHandle,
        seconds: float,
        load: BrowserLoad | None,
        replies_before: int,
    ) -> None:
        self.future = future
        self.method = method
        self.session_id = session_id
        self.timer = timer
        self.seconds = seconds
        self.load = load
        self.sent = load.now() if load is not None else 0.0
        self.replies_before = replies_before  # the connection's replies when it was sent

    def fail(self, exc: Exception) -> None:
        self.timer.cancel()
        if not self.future.done():
            self.future.set_exception(exc)


async def _get_json(http: aiohttp.ClientSession, host: str, port: int, path: str) -> Any:
    """GET a JSON document of the DevTools HTTP server."""
    async with http.get(f"http://{host}:{port}{path}") as response:
        response.raise_for_status()
        return await response.json(content_type=None)


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
