"""Enforcing a NavigationPolicy in the browser.

Two interception layers, both only installed when the policy can refuse something. By default
(no domain lists, ``private_network = "auto"`` refusing private addresses for a public start URL)
only navigations are checked: the driven page's CDP ``Fetch`` sees every document request (top
level, frames, every redirect hop) and a new tab is checked when the agent would switch to it.
That keeps Chromium's HTTP cache and costs nothing per subresource. With ``allowed_domains``,
``blocked_domains`` or ``private_network = "block"`` every request is checked:

* a context-wide Playwright route (``**/*``) sees the first request of everything every page of
  the context makes: navigations (links, forms, ``window.open``, ``location = ...``,
  ``javascript:`` links that navigate), new tabs and popups, iframes, subresources, fetch/XHR,
  beacons; plus a WebSocket route for ``ws:``/``wss:`` connections;
* Playwright does not route redirect hops, so the page the agent drives also gets a CDP ``Fetch``
  interception that sees every hop of every redirect (navigations and subresources alike).

A refused navigation is aborted (the page stays where it was) and reported as a page event,
which the loop hands to the policy in its next observation and records in the step. Refused
subresources are counted and logged, not reported (trackers on an allowed site would drown the
policy's prompt). Routing costs a round trip through Python per request and turns off
Chromium's HTTP cache for the context: see docs/safety.md for the measured overhead.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import Callable
from typing import Any

import structlog
from playwright.async_api import BrowserContext, Request, Route, WebSocketRoute
from playwright.async_api import Error as PlaywrightError

from ..safety import NavigationPolicy
from ..secrets import shorten
from .devtools import CDPChannel

__all__ = ["NavigationGuard"]

log = structlog.get_logger("webagent.browser")
_URL_CHARS = 160


def _is_popup(request: Request) -> bool:
    """Whether a navigation request is a new tab's first one (the tab has no frame yet)."""
    try:
        _ = request.frame
    except PlaywrightError:
        return True
    return False


def _short(url: str) -> str:
    return shorten(url, _URL_CHARS)  # redacted before it is cut: no part of a secret survives


class NavigationGuard:
    """Installs a policy's interception on a context and its driven pages; reports what it refused."""

    def __init__(self, policy: NavigationPolicy) -> None:
        self.policy = policy
        #: Receives each report for the policy; ``main_frame`` when a top-level navigation was refused.
        self.on_event: Callable[[str, bool], None] = lambda text, main_frame: None
        self.blocked_navigations = 0
        self.blocked_requests = 0
        #: Set when the first navigation of a new tab was refused (the tab is left on about:blank).
        self.popup_blocked = asyncio.Event()
        self._context: BrowserContext | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def active(self) -> bool:
        return self.policy.active

    @property
    def every_request(self) -> bool:
        """Whether subresources are checked too (else only navigations: see the module docstring)."""
        return self.policy.active and self.policy.every_request

    async def install(self, context: BrowserContext) -> None:
        if not self.every_request:
            return
        await context.route("**/*", self._route)
        await _WebSocketGate.of(context).add(context, self)
        self._context = context

    async def uninstall(self) -> None:
        """Remove the request route, and this guard from the context's WebSocket gate."""
        context, self._context = self._context, None
        if context is not None:
            _WebSocketGate.of(context).guards.discard(self)
            with contextlib.suppress(PlaywrightError):
                await context.unroute("**/*", self._route)

    async def attach(self, cdp: CDPChannel, main_frame_id: str) -> None:
        """Watch the redirects of one page (its CDP session), which the route does not see."""
        if not self.policy.active:
            return
        cdp.on("Fetch.requestPaused", lambda event: self._spawn(self._paused(cdp, event, main_frame_id)))
        pattern: dict[str, str] = {"urlPattern": "*", "requestStage": "Request"}
        if not self.every_request:
            pattern["resourceType"] = "Document"
        await cdp.send("Fetch.enable", {"patterns": [pattern]})

    async def refuse(self, url: str) -> str | None:
        """Why the agent itself must not open ``url`` (checked before any request is made)."""
        return await self.policy.check_resolved(url, navigation=True)

    # -- handlers ----------------------------------------------------------------------------
    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _route(self, route: Route, request: Request) -> None:
        navigation = request.is_navigation_request()
        reason = await self.policy.check_resolved(request.url, navigation=navigation)
        try:
            if reason is None:
                await route.fallback()
                return
            # An aborted navigation leaves the page where it was; a new tab whose first navigation
            # is merely aborted never finishes opening, so it gets an error page (and is closed).
            await route.abort("aborted" if navigation and not _is_popup(request) else "blockedbyclient")
        except PlaywrightError:
            return  # the page went away meanwhile
        if navigation:
            self._report_navigation(request, reason)
        else:
            self._report_request(request.url, reason)

    async def _paused(self, cdp: CDPChannel, event: dict[str, Any], main_frame_id: str) -> None:
        request_id = event["requestId"]
        url = str(event["request"]["url"])
        reason: str | None = None
        navigation = event.get("resourceType") == "Document"
        redirect = bool(event.get("redirectedRequestId"))
        if redirect or not self.every_request:  # with the route on, first hops are its business
            reason = await self.policy.check_resolved(url, navigation=navigation)
        try:
            if reason is None:
                await cdp.send("Fetch.continueRequest", {"requestId": request_id})
                return
            await cdp.send("Fetch.failRequest", {"requestId": request_id, "errorReason": "Aborted"})
        except PlaywrightError:
            return
        if navigation:
            self.blocked_navigations += 1
            what = "a redirect" if redirect else "a navigation"
            text = f"Blocked {what} to {_short(url)}: {reason}; the page stayed where it was."
            self.on_event(text, event.get("frameId") == main_frame_id)
            log.info("navigation_blocked", url=_short(url), reason=reason, redirect=True)
        else:
            self._report_request(url, reason)

    def refuse_websocket(self, url: str) -> str | None:
        """Why a WebSocket to ``url`` is refused (None: allowed); a refusal is counted and logged."""
        reason = self.policy.check(url, navigation=False)
        if reason is not None:
            self._report_request(url, reason)
        return reason

    def _report_navigation(self, request: Request, reason: str) -> None:
        self.blocked_navigations += 1
        url = _short(request.url)
        frame = None if _is_popup(request) else request.frame
        main_frame = False
        if frame is None:
            self.popup_blocked.set()
            text = f"Blocked a new tab that was to open {url}: {reason}."
        elif frame.parent_frame is not None:
            text = f"Blocked a frame on the page from loading {url}: {reason}."
        else:
            main_frame = True
            text = f"Blocked a navigation to {url}: {reason}; the page stayed where it was."
        self.on_event(text, main_frame)
        log.info("navigation_blocked", url=url, reason=reason)

    def _report_request(self, url: str, reason: str) -> None:
        self.blocked_requests += 1
        log.debug("request_blocked", url=_short(url), reason=reason)


class _WebSocketGate:
    """The one WebSocket route of a context, asking the guards installed on it now (Playwright
    cannot remove a WebSocket route: one per guard would pile up on a caller's context, which
    outlives its runs, and apply finished runs' policies)."""

    def __init__(self) -> None:
        # Nothing that leads back to its context (the gate is the value of a weak-keyed entry of
        # that context, and a guard's reports go to a session that holds the context): weak.
        self.guards: weakref.WeakSet[NavigationGuard] = weakref.WeakSet()
        self._routed = False

    @classmethod
    def of(cls, context: BrowserContext) -> _WebSocketGate:
        gate = _GATES.get(context)
        if gate is None:
            gate = _GATES[context] = cls()
        return gate

    async def add(self, context: BrowserContext, guard: NavigationGuard) -> None:
        self.guards.add(guard)
        if not self._routed:
            self._routed = True  # before the await: two guards installed at once route it once
            try:
                await context.route_web_socket(lambda _: True, self._handle)
            except BaseException:
                self._routed = False
                self.guards.discard(guard)
                raise

    async def _handle(self, ws: WebSocketRoute) -> None:
        # Refused when a guard installed now refuses it (as the request routes of several guards do).
        for guard in list(self.guards):
            if guard.refuse_websocket(ws.url) is not None:
                with contextlib.suppress(PlaywrightError):
                    await ws.close(code=1008, reason="blocked by the agent's navigation policy")
                return
        ws.connect_to_server()


_GATES: weakref.WeakKeyDictionary[BrowserContext, _WebSocketGate] = weakref.WeakKeyDictionary()
