"""How a browser session knows the page has reacted to an action (mixed into ``BrowserSession``).

After each action ``settle`` waits only as long as the page needs: one round trip through the
page's main thread (``Runtime.evaluate`` on the session's own CDP session, which also reads the
scroll offsets and title the next screenshot needs), plus a frame after scrolling; then the load
of a navigation or new tab the action started, capped by ``settle_timeout_s``.

Navigations are known from CDP events on that same session: ``Page.frameStartedNavigating``
(every main-frame navigation that leaves the document, browser-initiated and history ones
included) and ``Page.frameRequestedNavigation`` (what an older browser reports). The page asks
for them while it handles the action's input, so in practice they arrive before the check's
answer. New tabs (``Page.windowOpen``) and file choosers (``Page.fileChooserOpened``) come the
same way and are handled by ``webagent.browser.tabs`` and ``webagent.browser.faults``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import structlog
from playwright.async_api import BrowserContext, Page
from playwright.async_api import Error as PlaywrightError
from playwright.async_api import TimeoutError as PlaywrightTimeoutError

from ..config import BrowserConfig
from ..errors import ActionError, BrowserError
from .capture import VIEW_ERRORS, Scroll
from .deadline import BoundedCDPSession, within
from .devtools import CDPChannel, DevToolsSession, devtools_for
from .faults import ABORT_GRACE_S, first_line
from .guard import NavigationGuard

__all__ = ["Settling"]

log = structlog.get_logger("webagent.browser")

#: Page.frameStartedNavigating types that stay in the document (nothing to wait for).
_SAME_DOCUMENT = frozenset({"sameDocument", "historySameDocument"})


class Settling:
    """The session's own CDP session, its navigation events, and the wait after each action."""

    # Provided by BrowserSession and the other mixins.
    page: Page
    context: BrowserContext
    config: BrowserConfig
    guard: NavigationGuard | None
    _events: list[str]
    _new_pages: list[Page]
    _cdp: CDPChannel | None
    _main_frame_id: str
    _crashed: bool
    _nav_requested: bool
    _nav_committed: asyncio.Event
    _nav_aborted: bool
    _abort_resolved: asyncio.Event
    _nav_failure: str | None
    _popup_requested: bool
    _new_page_arrived: asyncio.Event
    _action_events: int
    _dialog_opened: bool
    _settled_scroll: Scroll | None

    if TYPE_CHECKING:
        from .capture import Prefetch

        def _on_window_open(self, _: object) -> None: ...
        def _on_file_chooser(self, params: dict[str, Any]) -> None: ...
        def _on_frame_committed(self, params: dict[str, Any]) -> None: ...
        def _invalidate_view(self) -> None: ...
        def _drop_prefetch(self) -> None: ...
        def _start_prefetch(self) -> Prefetch | None: ...
        def _check_prefetch(self, started: Prefetch) -> None: ...
        async def _view(self, *, after_frame: bool = False) -> Scroll: ...
        async def _switch_to_new_page(self, deadline: float) -> None: ...
        def _switch_to_open_page(self) -> None: ...

    # -- the session's CDP session and its navigation events ----------------------------
    async def _cdp_session(self) -> CDPChannel:
        lost = self._cdp
        if isinstance(lost, DevToolsSession) and lost.closed and not lost.gone and not self.page.is_closed():
            self._cdp = None  # its connection was lost with the page still open: a new session
        if self._cdp is None:
            cdp = await self._open_cdp()
            for event, handler in (
                ("Page.windowOpen", self._on_window_open),
                ("Page.frameRequestedNavigation", self._on_requested_navigation),
                ("Page.frameStartedNavigating", self._on_started_navigating),
                ("Page.fileChooserOpened", self._on_file_chooser),
                ("Page.frameNavigated", self._on_frame_committed),
                ("Page.javascriptDialogOpening", self._on_dialog_opening),
            ):
                cdp.on(event, self._while_current(cdp, handler))
            try:
                await self._set_up(cdp)
            except BaseException:
                with contextlib.suppress(PlaywrightError, TimeoutError):
                    async with asyncio.timeout(2.0):
                        await cdp.detach()  # no handlers left behind
                raise
            self._cdp = cdp
        return self._cdp

    async def _open_cdp(self) -> CDPChannel:
        """A session on the browser's own DevTools port where there is one (``webagent.browser.devtools``:
        no driver hop per command), else Playwright's."""
        if self.config.direct_cdp:
            devtools = devtools_for(self.context.browser)
            if devtools is not None:
                try:
                    return await devtools.attach(self.context, self.page)
                except PlaywrightError as exc:
                    log.debug("devtools_attach_failed", error=first_line(exc))
        timeout_s = self.config.command_timeout_s
        session = await within(self.context.new_cdp_session(self.page), timeout_s, "new_cdp_session")
        return BoundedCDPSession(session, timeout_s)

    def _while_current(self, cdp: CDPChannel, handler: Callable[[Any], None]) -> Callable[[Any], None]:
        """``handler`` for the events of ``cdp`` while it is the session's own: a tab the session
        has left (or a page it replaced) keeps its CDP session, whose events must not count."""

        def forward(params: Any) -> None:
            if self._cdp is cdp:
                handler(params)

        return forward

    async def _set_up(self, cdp: CDPChannel) -> None:
        # A crashed page never answers Page.enable; a new renderer on a loaded machine may take long.
        # A PlaywrightError for a crashed page: the screenshot reopens it (a BrowserError would end the run).
        if self._crashed:
            raise PlaywrightError("Page.enable: Target crashed")
        timeout_s = self.config.command_timeout_s
        try:
            async with asyncio.timeout(timeout_s):
                await cdp.send("Page.enable")
        except TimeoutError:
            if self._crashed:
                raise PlaywrightError("Page.enable: Target crashed") from None
            raise BrowserError(f"the page does not answer DevTools requests (none within {timeout_s:g} s)") from None
        # Choosers are intercepted here rather than through Playwright's "filechooser" event, which
        # the driver reports a round trip later: a chooser then reaches the very next observation.
        # Its failure (an old browser) costs only that report, as Playwright ignores it too.
        intercept: Any
        tree: Any
        intercept, tree = await asyncio.gather(
            cdp.send("Page.setInterceptFileChooserDialog", {"enabled": True}),
            cdp.send("Page.getFrameTree"),
            return_exceptions=True,
        )
        if isinstance(tree, BaseException):
            raise tree
        if isinstance(intercept, BaseException):
            log.debug("file_chooser_interception_unavailable", error=first_line(intercept))
        self._main_frame_id = str(tree["frameTree"]["frame"]["id"])
        if self.guard is not None:
            await self.guard.attach(cdp, self._main_frame_id)

    def _on_requested_navigation(self, params: dict[str, Any]) -> None:
        # Fired by the renderer as soon as a link/form/script asks to navigate, before any request.
        if params.get("disposition", "currentTab") == "currentTab" and params.get("frameId") == self._main_frame_id:
            self._nav_requested = True

    def _on_started_navigating(self, params: dict[str, Any]) -> None:
        # Every navigation, browser-initiated and history ones included (recent Chromium: Playwright
        # 1.51+ bundles one; an older browser behind cdp_endpoint reports only the renderer's, through
        # frameRequestedNavigation). Not Playwright's "request" event: subscribing to it costs
        # ~0.25 ms of Python for every request of every page.
        if params.get("frameId") == self._main_frame_id and params.get("navigationType") not in _SAME_DOCUMENT:
            self._nav_requested = True

    def _on_dialog_opening(self, params: Any) -> None:
        # On the session's own CDP channel, in order with settle's check: Playwright's "dialog"
        # event (which accepts it and reports it) may come after the check has answered.
        self._dialog_opened = True

    # -- settling ---------------------------------------------------------------------------
    async def _before_action(self) -> None:
        if self._crashed:
            raise ActionError("the page crashed before the action (its renderer process died); it will be reopened")
        with contextlib.suppress(PlaywrightError, BrowserError):  # subscribe to Page.windowOpen before a tab can open
            await self._cdp_session()
        self._drop_prefetch()
        self._action_events = len(self._events)
        self._dialog_opened = False
        self._invalidate_view()
        self._nav_requested = False
        self._nav_committed.clear()
        self._nav_aborted = False
        self._abort_resolved.clear()
        self._popup_requested = False
        self._new_page_arrived.clear()
        self._nav_failure = None

    def _settle_ms(self) -> float:
        return max(1.0, self.config.settle_timeout_s * 1000)

    async def settle(self, *, next_frame: bool = False) -> None:
        """Wait until the page has reacted to the last action, at most ``settle_timeout_s``."""
        deadline = time.monotonic() + self.config.settle_timeout_s
        # A navigation may replace the document mid-wait, or the page may be busy: both are fine.
        self._invalidate_view()
        self._drop_prefetch()
        # After scrolling or waiting the next screenshot is taken after the next frame instead.
        started = None if next_frame else self._start_prefetch()
        try:
            await self._settle(deadline, next_frame)
        finally:
            if started is not None:
                self._check_prefetch(started)

    async def _settle(self, deadline: float, next_frame: bool) -> None:
        with contextlib.suppress(*VIEW_ERRORS):
            async with asyncio.timeout(min(0.5, self.config.settle_timeout_s)):
                self._settled_scroll = await self._view(after_frame=next_frame)
        cdp = self._cdp
        if isinstance(cdp, DevToolsSession) and cdp.gone and not self.page.is_closed():
            # The tab closed itself (window.close()): DevTools says so a moment before Playwright.
            with contextlib.suppress(PlaywrightError):
                await self.page.wait_for_event("close", timeout=1000)
        if self._popup_requested and not self._new_pages:
            # The page asked for a new tab (link with target=_blank, window.open): wait for it.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                    await self._new_page_arrived.wait()
        if self._new_pages:
            await self._switch_to_new_page(deadline)
        elif self.page.is_closed():
            self._switch_to_open_page()
        if self._nav_requested:
            self._invalidate_view()
            await self._wait_for_navigation(deadline)

    async def _wait_for_navigation(self, deadline: float) -> None:
        try:
            if not self._nav_committed.is_set():
                async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                    await self._nav_committed.wait()
            if self._nav_aborted and not self._abort_resolved.is_set():
                # A download, announced a moment after the abort? (Or another navigation's commit.)
                grace = min(ABORT_GRACE_S, max(0.0, deadline - time.monotonic()))
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(grace):
                        await self._abort_resolved.wait()
            remaining = max(1.0, (deadline - time.monotonic()) * 1000)
            await self.page.wait_for_load_state("load", timeout=remaining)
        except (TimeoutError, PlaywrightTimeoutError):
            self._events.append(f"The page was still loading after {self.config.settle_timeout_s:g} s.")
        except PlaywrightError:
            pass
        finally:
            self._nav_requested = False
            if self._nav_failure is not None:
                self._events.append(self._nav_failure)
                self._nav_failure = None
