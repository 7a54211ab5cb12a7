"""One page's flattened CDP session on a direct DevTools connection (``DevToolsSession``), and what a
session offers whether it is that or Playwright's own ``CDPSession`` (``CDPChannel``).

The connection itself (its WebSocket, command ids, deadlines and the reader that dispatches events
to sessions) is ``devtools.py``'s; a session asks it for what it needs through ``Connection``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any, Protocol

import structlog
from playwright.async_api import Error as PlaywrightError

__all__ = ["CLOSED", "CDPChannel", "Connection", "DevToolsError", "DevToolsSession", "retrieve"]

log = structlog.get_logger("webagent.browser")

#: Why a command of a closed target fails (what ``PageState.target_closed`` looks for).
CLOSED = "Target page, context or browser has been closed"


class CDPChannel(Protocol):
    """What the session uses of a CDP session: Playwright's ``CDPSession`` or a ``DevToolsSession``."""

    async def send(self, method: str, params: dict[str, Any] | None = None, *, timeout_s: float | None = None) -> Any:
        """The command's reply; CommandTimeout past ``timeout_s`` (default: the channel's deadline)."""

    def on(self, event: str, f: Callable[..., Any]) -> None: ...
    async def detach(self) -> None: ...


class DevToolsError(PlaywrightError):
    """A command failed (a protocol error, a closed target or connection); a Playwright ``Error``,
    so callers handle it as they handle Playwright's."""


class Connection(Protocol):
    """What a session uses of its DevTools connection (``devtools.DevTools``)."""

    sessions: dict[str, DevToolsSession]

    def request(
        self,
        method: str,
        params: dict[str, Any] | None,
        session_id: str | None = None,
        *,
        timeout_s: float | None = None,
    ) -> asyncio.Future[Any]: ...

    def fail_session(self, session_id: str, reason: str) -> None: ...


class DevToolsSession:
    """One page's flattened CDP session on a ``DevTools`` connection."""

    def __init__(self, devtools: Connection, session_id: str) -> None:
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
        timeout_s: float | None = None,
    ) -> asyncio.Future[Any]:
        """Send a command; its reply (the ``result`` object) is the future's, or CommandTimeout
        after ``timeout_s`` (default: the connection's). It goes out right after the current loop
        turn, with the other commands of that turn (``DevTools.request``)."""
        if self.closed or self.crashed:
            future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            future.set_exception(DevToolsError(f"{method}: {'Target crashed' if self.crashed else CLOSED}"))
            return future
        return self._devtools.request(method, params, self.session_id, timeout_s=timeout_s)

    async def send(self, method: str, params: dict[str, Any] | None = None, *, timeout_s: float | None = None) -> Any:
        return await self.request(method, params, timeout_s=timeout_s)

    def on(self, event: str, f: Callable[..., Any]) -> None:
        self._handlers.setdefault(event, []).append(f)

    async def click(self, x: float, y: float) -> None:
        """A left click as Playwright's ``mouse.click`` sends it (move, press, release), the three
        events sent together; done when the page has handled the release. Playwright's own idea
        of the mouse position is not updated: code that relies on it moves the mouse first."""
        base = {"x": x, "y": y, "modifiers": 0}
        move = {"type": "mouseMoved", "button": "none", "buttons": 0, **base}
        press = {"button": "left", "clickCount": 1, **base}
        for params in (move, {"type": "mousePressed", "buttons": 1, **press}):
            # Their failures (a closed page) are the release's too: read here, not left unretrieved.
            self.request("Input.dispatchMouseEvent", params).add_done_callback(retrieve)
        await self.request("Input.dispatchMouseEvent", {"type": "mouseReleased", "buttons": 0, **press})

    async def detach(self) -> None:
        if not self.closed:
            self.end(CLOSED)
            with contextlib.suppress(PlaywrightError):  # DevToolsError, CommandTimeout
                await self._devtools.request("Target.detachFromTarget", {"sessionId": self.session_id})

    def dispatch(self, method: str, params: Any) -> None:
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

    def end(self, reason: str) -> None:
        """No more commands: those waiting fail with ``reason``; the connection forgets it."""
        self.closed = True
        self._devtools.fail_session(self.session_id, reason)
        self._devtools.sessions.pop(self.session_id, None)


def retrieve(future: asyncio.Future[Any]) -> None:
    """A done callback: the future's exception read, so that none is left unretrieved."""
    if not future.cancelled():
        future.exception()
