"""Enforcing a NavigationPolicy in the browser: one rule for every request a page makes.

Only installed when the policy can refuse something. Three layers, each for what the one before
cannot see (docs/security.md says what each holds against):

1. **Every request, judged in Python** (``webagent.browser.targets``): a CDP ``Fetch``
   interception on every target of the context -- the pages and the tabs they open, their
   out-of-process frames, dedicated, shared and service workers -- pauses each request, first
   hops, redirect hops and the hops of a loader Chromium restarts alike, and this guard's
   ``verdict`` decides. On a browser launched here that is done over its direct DevTools
   connection, every target attached before it runs; without one (``direct_cdp`` off, remote
   browsers) over the driven page's own CDP session, beside a context-wide Playwright route that
   sees the first request of everything else. By default (no domain lists, ``private_network =
   "auto"``) only document requests are paused: navigations of pages, frames and new tabs, every
   hop; with ``allowed_domains``, ``blocked_domains`` or ``private_network = "block"``, every
   request.
2. **What never reaches that interception**, refused by Chromium itself: WebSockets by
   DevTools network conditions (``netrules.websocket_conditions``), and, in the browsers launched
   for guarded sessions (``launcher.HARDENED_ARGS``), shared workers, WebRTC over UDP and FedCM
   switched off.
3. **The proxy net** (``netrules.proxy_net``): a context the agent creates under an allow-list,
   or with private networks refused, gets a proxy that does not exist, bypassed only by what the
   policy allows, so that no channel at all reaches anything else.

A refused navigation is aborted (the page stays where it was) and reported as a page event,
which the loop hands to the policy in its next observation and records in the step. Refused
subresources are counted and logged, not reported (trackers on an allowed site would drown the
policy's prompt).
"""

from __future__ import annotations

import contextlib
import weakref
from typing import Any

from playwright.async_api import BrowserContext, Request, Route, WebSocketRoute
from playwright.async_api import Error as PlaywrightError

from ..guard.navigation import NavigationPolicy
from .devsession import CDPChannel
from .devtools import DevTools, devtools_for
from .interception import TargetInterception
from .netrules import proxy_net
from .refusals import PolicyJudge
from .targets import TargetWatcher
from .tunnels import TunnelledChildren

__all__ = ["NavigationGuard"]

_TUNNEL_TIMEOUT_S = 30.0  # a command to a frame or worker reached through the page's session


def _is_popup(request: Request) -> bool:
    """Whether a navigation request is a new tab's first one (the tab has no frame yet)."""
    try:
        _ = request.frame
    except PlaywrightError:
        return True
    return False


class NavigationGuard(PolicyJudge):
    """Installs a policy's interception on a context and its targets; reports what it refused."""

    def __init__(self, policy: NavigationPolicy) -> None:
        super().__init__(policy)
        self._context: BrowserContext | None = None
        self._devtools: DevTools | None = None  # the browser's direct connection: every target guarded
        self._context_id = ""  # the context's CDP id, once registered with the connection's watcher
        self._main_frame_id = ""  # of the page last attached (for the route's reports)

    def context_options(self) -> dict[str, Any]:
        """Options for ``new_context`` of a context this guard will watch: no service workers, and
        the proxy net of the policy (``netrules.proxy_net``) where it has one."""
        if not self.active:
            return {}
        options: dict[str, Any] = {"service_workers": "block"}
        net = proxy_net(self.policy)
        if net is not None:
            options["proxy"] = net
        return options

    async def install(self, context: BrowserContext) -> None:
        """Guard ``context``: over the browser's direct DevTools connection where there is one
        (every target, from ``attach`` on), else with a Playwright route and WebSocket route."""
        if not self.active:
            return
        self._context = context
        self._devtools = devtools_for(context.browser)
        if self._devtools is None and self.every_request:
            await context.route("**/*", self._route)
            await _WebSocketGate.of(context).add(context, self)

    async def uninstall(self) -> None:
        """Undo ``install`` (a caller's context that outlives the run keeps nothing of it)."""
        context, self._context = self._context, None
        devtools, context_id, self._context_id = self._devtools, self._context_id, ""
        if devtools is not None and context_id:
            await TargetWatcher.of(devtools).remove(context_id, self)
        if context is not None and devtools is None:
            _WebSocketGate.of(context).guards.discard(self)
            with contextlib.suppress(PlaywrightError):
                await context.unroute("**/*", self._route)

    async def attach(self, cdp: CDPChannel, main_frame_id: str) -> None:
        """Watch a page the session drives through its CDP session ``cdp``. Over a direct
        connection the first call registers the context with the connection's ``TargetWatcher``
        (which then guards this page and every other target); otherwise the page's own requests
        are intercepted on ``cdp``."""
        if not self.active:
            return
        self._main_frame_id = main_frame_id
        if self._devtools is not None:
            if not self._context_id:
                info = await cdp.send("Target.getTargetInfo")
                context_id = str(info["targetInfo"]["browserContextId"])
                await TargetWatcher.of(self._devtools).add(context_id, self)
                self._context_id = context_id
            return
        await TargetInterception(self, cdp, "page", main_frame_id=main_frame_id).start()
        await TunnelledChildren(self, cdp, _TUNNEL_TIMEOUT_S).start()

    async def refuse(self, url: str) -> str | None:
        """Why the agent itself must not open ``url`` (checked before any request is made)."""
        return await self.policy.check_resolved(url, navigation=True)

    # -- without a direct connection: Playwright's routes ---------------------------------------
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
        if not navigation:
            self.refused_request(request.url, reason)
        elif _is_popup(request):
            self.refused_new_tab(request.url, reason)
        elif request.frame.parent_frame is not None:
            self.refused_frame(request.url, reason, "")
        else:
            self.refused_navigation(request.url, reason, self._main_frame_id, redirect=False)

    def refuse_websocket(self, url: str) -> str | None:
        """Why a WebSocket to ``url`` is refused (None: allowed); a refusal is counted and logged."""
        reason = self.policy.check(url, navigation=False)
        if reason is not None:
            self.refused_request(url, reason)
        return reason


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
