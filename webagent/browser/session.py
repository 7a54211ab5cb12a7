"""One browser session: a page in its own context, driven like a user with mouse and keyboard.

After each action the session waits only as long as the page needs: one round trip through the
page's main thread (plus a frame after scrolling), and the load of a navigation or new tab the
action started, capped by ``settle_timeout_s``. Screenshots are ``webagent.browser.capture``'s.

Pages that misbehave never hang a run: dialogs (``beforeunload`` included) are accepted, loads
are capped, and downloads, file choosers, failed navigations and renderer crashes are handled
by ``webagent.browser.faults`` (each reported as an event for the policy).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any

import structlog
from playwright.async_api import (
    Browser,
    BrowserContext,
    CDPSession,
    Dialog,
    Page,
)
from playwright.async_api import (
    Error as PlaywrightError,
)
from playwright.async_api import (
    Frame as PlaywrightFrame,
)
from playwright.async_api import (
    TimeoutError as PlaywrightTimeoutError,
)

from ..actions import normalize_key
from ..config import BrowserConfig
from ..errors import ActionError, BrowserError, NavigationError
from .capture import VIEW_ERRORS, ScreenCapture
from .faults import ABORT_GRACE_S, PageFaults, first_line
from .guard import NavigationGuard
from .scripts import FIND_SELECT, MASK_FOCUSED, PAGE_TEXT
from .tabs import TabFollowing

__all__ = ["BrowserSession"]

log = structlog.get_logger("webagent.browser")

_TYPE_FAST_ABOVE = 64  # longer texts are inserted at once instead of key by key
_CDP_ATTACH_TIMEOUT_S = 10.0  # Page.enable never answers on a crashed page
#: Page.frameStartedNavigating types that stay in the document (nothing to wait for).
_SAME_DOCUMENT = frozenset({"sameDocument", "historySameDocument"})


class BrowserSession(ScreenCapture, TabFollowing, PageFaults):
    """A page the agent drives. Create with ``BrowserSession.create`` or wrap an existing page."""

    def __init__(
        self, page: Page, config: BrowserConfig, *, owns_context: bool = False, owns_page: bool = False
    ) -> None:
        self.config = config
        self.page = page
        self.context: BrowserContext = page.context
        self._owns_context = owns_context
        self._owns_page = owns_page
        self._events: list[str] = []
        self._new_pages: list[Page] = []
        self._cdp: CDPSession | None = None
        self._nav_requested = False
        self._nav_committed = asyncio.Event()
        self._nav_aborted = False
        self._abort_resolved = asyncio.Event()
        self._popup_requested = False  # CDP Page.windowOpen: a new tab is on its way
        self._init_capture()
        self._main_frame_id = ""
        self._crashed = False  # the renderer of self.page died; reopened before the next screenshot
        self._crashes = 0
        self._saw_target_closed = False  # a call failed because the page, context or browser closed
        self._nav_failure: str | None = None  # the network error of the last failed navigation
        self._new_page_arrived = asyncio.Event()
        self.guard: NavigationGuard | None = None
        self._error_page_committed = asyncio.Event()  # Chromium's page for a failed navigation
        size = page.viewport_size or {"width": config.viewport.width, "height": config.viewport.height}
        self.viewport = (int(size["width"]), int(size["height"]))
        self.context.on("page", self._on_new_page)
        self._watch(page)

    @classmethod
    async def create(
        cls, browser: Browser, config: BrowserConfig, *, block_service_workers: bool = False
    ) -> BrowserSession:
        """A fresh context and page on a shared browser."""
        try:
            context = await browser.new_context(
                viewport={"width": config.viewport.width, "height": config.viewport.height},
                device_scale_factor=1,
                accept_downloads=False,
                # Requests of service workers bypass routing: a guarded context has none.
                service_workers="block" if block_service_workers else "allow",
            )
            page = await context.new_page()
        except PlaywrightError as exc:
            raise BrowserError(f"cannot open a browser context: {first_line(exc)}") from None
        return cls(page, config, owns_context=True)

    async def _watch_navigations(self) -> None:
        if self.guard is not None and self.guard.active:
            with contextlib.suppress(PlaywrightError):
                await self._cdp_session()  # its Fetch interception watches navigations from now on

    async def set_guard(self, guard: NavigationGuard) -> None:
        """Enforce a navigation policy on this session's context (before its first navigation)."""
        self.guard = guard
        guard.on_event = self._on_guard_event
        await guard.install(self.context)
        await self._watch_navigations()

    def _on_guard_event(self, text: str, main_frame: bool) -> None:
        self._events.append(text)
        if main_frame:  # the navigation will not commit (and no download follows): settle() stops waiting
            self._navigation_settled()

    # -- events ---------------------------------------------------------------------------
    def _watch(self, page: Page) -> None:
        page.on("dialog", self._on_dialog)
        page.on("framenavigated", self._on_frame_navigated)
        self._watch_faults(page)

    def _on_requested_navigation(self, params: dict[str, Any]) -> None:
        # Fired by the renderer as soon as a link/form/script asks to navigate, before any request.
        if params.get("disposition", "currentTab") == "currentTab" and params.get("frameId") == self._main_frame_id:
            self._nav_requested = True

    async def _on_dialog(self, dialog: Dialog) -> None:
        kind = dialog.type
        message = " ".join(dialog.message.split())[:300]
        try:
            if kind == "prompt":
                await dialog.accept(dialog.default_value)
            else:
                await dialog.accept()
        except PlaywrightError:
            return
        text = (
            f"A JavaScript {kind} dialog said: {message!r} (it was accepted)."
            if message
            else (f"A JavaScript {kind} dialog appeared (it was accepted).")
        )
        self._events.append(text)

    def _on_started_navigating(self, params: dict[str, Any]) -> None:
        # Every navigation, browser-initiated and history ones included (recent Chromium: Playwright
        # 1.51+ bundles one; an older browser behind cdp_endpoint reports only the renderer's, through
        # frameRequestedNavigation). Not Playwright's "request" event: subscribing to it costs
        # ~0.25 ms of Python for every request of every page.
        if params.get("frameId") == self._main_frame_id and params.get("navigationType") not in _SAME_DOCUMENT:
            self._nav_requested = True

    def _on_frame_navigated(self, frame: PlaywrightFrame) -> None:
        if frame == self.page.main_frame:
            self._navigation_settled()
            if frame.url.startswith("chrome-error:"):
                self._error_page_committed.set()

    def drain_events(self) -> list[str]:
        """Page events since the last call (dialogs, new tabs, crashes, slow loads)."""
        events, self._events = self._events, []
        return events

    @property
    def browser_crashed(self) -> bool:
        """Whether the browser under this session disconnected (crashed or was killed)."""
        browser = self.context.browser
        return browser is not None and not browser.is_connected()

    def _target_closed(self, exc: PlaywrightError) -> bool:
        """Whether ``exc`` says the page, context or browser is gone (remembered for the batch)."""
        closed = "has been closed" in str(exc) or self.page.is_closed() or self.browser_crashed
        self._saw_target_closed |= closed
        return closed

    async def confirm_browser_crash(self, timeout_s: float = 2.0) -> bool:
        """Whether the browser died under this session. When a call already failed because its
        target closed, waits up to ``timeout_s`` for the disconnect (the driver may report it later)."""
        browser = self.context.browser
        if browser is None or not browser.is_connected():
            return browser is not None
        if not self._saw_target_closed:
            return False
        gone = asyncio.Event()

        def on_disconnected(_: object) -> None:
            gone.set()

        browser.on("disconnected", on_disconnected)
        try:
            if browser.is_connected():
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(timeout_s):
                        await gone.wait()
        finally:
            browser.remove_listener("disconnected", on_disconnected)
        return not browser.is_connected()

    # -- observation ----------------------------------------------------------------------
    @property
    def url(self) -> str:
        return self.page.url

    async def page_text(self) -> str:
        """The page's visible text and form values (for replay fingerprints; not on the hot path)."""
        try:
            async with asyncio.timeout(5.0):
                text = await self.page.evaluate(PAGE_TEXT)
        except (PlaywrightError, TimeoutError):
            return ""
        return str(text)

    async def _cdp_session(self) -> CDPSession:
        if self._cdp is None:
            cdp = await self.context.new_cdp_session(self.page)
            for event, handler in (
                ("Page.windowOpen", self._on_window_open),
                ("Page.frameRequestedNavigation", self._on_requested_navigation),
                ("Page.frameStartedNavigating", self._on_started_navigating),
                ("Page.fileChooserOpened", self._on_file_chooser),
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

    def _while_current(self, cdp: CDPSession, handler: Callable[[Any], None]) -> Callable[[Any], None]:
        """``handler`` for the events of ``cdp`` while it is the session's own: a tab the session
        has left (or a page it replaced) keeps its CDP session, whose events must not count."""

        def forward(params: Any) -> None:
            if self._cdp is cdp:
                handler(params)

        return forward

    async def _set_up(self, cdp: CDPSession) -> None:
        try:
            async with asyncio.timeout(_CDP_ATTACH_TIMEOUT_S):
                await cdp.send("Page.enable")
        except TimeoutError:
            raise BrowserError("the page does not answer DevTools requests") from None
        # Choosers are intercepted here rather than through Playwright's "filechooser" event, which
        # the driver reports a round trip later: a chooser then reaches the very next observation.
        # Its failure (an old browser) costs only that report, as Playwright ignores it too.
        replies: list[Any] = await asyncio.gather(
            cdp.send("Page.setInterceptFileChooserDialog", {"enabled": True}),
            cdp.send("Page.getFrameTree"),
            return_exceptions=True,
        )
        intercept, tree = replies
        if isinstance(tree, BaseException):
            raise tree
        if isinstance(intercept, BaseException):
            log.debug("file_chooser_interception_unavailable", error=first_line(intercept))
        self._main_frame_id = str(tree["frameTree"]["frame"]["id"])
        if self.guard is not None:
            await self.guard.attach(cdp, self._main_frame_id)

    # -- navigation -----------------------------------------------------------------------
    async def goto(self, url: str, *, start: bool = False) -> None:
        """Open ``url``. At the start of a run a failure is a NavigationError, later an ActionError."""
        if self._crashed:
            await self._replace_page()
        self._drop_prefetch()
        self._invalidate_view()
        if self.guard is not None and self.guard.active:
            reason = await self.guard.refuse(url)
            if reason is not None:
                if start:
                    raise NavigationError(
                        f"cannot open {url}: {reason}; check allowed_domains/blocked_domains/private_network"
                    )
                raise ActionError(f"{url} was not opened: {reason}")
            with contextlib.suppress(PlaywrightError):
                await self._cdp_session()  # watches redirects from the first request on
        try:
            await self._goto(url)
        except PlaywrightTimeoutError:
            self._events.append(f"The page was still loading after {self.config.navigation_timeout_s:g} s.")
        except PlaywrightError as exc:
            reason = first_line(exc).removeprefix("Page.goto: ")
            if self._target_closed(exc) and (start or self.browser_crashed):
                raise BrowserError(f"the page or browser closed while opening {url}: {reason}") from None
            if start:
                raise NavigationError(f"cannot open {url}: {reason}; check the URL and that the site is up") from None
            raise ActionError(f"cannot open {url}: {reason}") from None
        finally:
            self._nav_requested = False
            self._nav_failure = None  # a goto reports its own failure

    async def _goto(self, url: str) -> None:
        self._error_page_committed.clear()
        try:
            await self.page.goto(url, wait_until="load", timeout=self.config.navigation_timeout_s * 1000)
        except PlaywrightTimeoutError:
            raise
        except PlaywrightError as exc:
            await self._after_failed_goto(exc)
            raise

    async def go_back(self) -> None:
        await self._before_action()
        cdp = await self._cdp_session()
        history = await self._guard(cdp.send("Page.getNavigationHistory"))
        index = int(history["currentIndex"])
        if index <= 0 or history["entries"][index - 1]["url"] in ("about:blank", ""):
            raise ActionError("there is no previous page in this tab's history")
        await self._navigate(self.page.go_back(wait_until="commit", timeout=self._settle_ms()))

    async def refresh(self) -> None:
        await self._before_action()
        await self._navigate(self.page.reload(wait_until="commit", timeout=self._settle_ms()))

    async def _navigate(self, awaitable: Any) -> None:
        """History navigation: wait for the commit, then settle (the load is capped there)."""
        try:
            await awaitable
        except PlaywrightTimeoutError:
            self._events.append(f"The page was still loading after {self.config.settle_timeout_s:g} s.")
        except PlaywrightError as exc:
            raise ActionError(first_line(exc)) from None
        self._nav_requested = True
        await self.settle()

    # -- input ----------------------------------------------------------------------------
    async def click(self, x: float, y: float) -> None:
        await self._before_action()
        await self._guard(self.page.mouse.click(x, y))
        await self.settle()

    async def write(self, x: float, y: float, text: str, *, press_enter: bool, mask: bool = False) -> None:
        """Type into the field at (x, y). ``mask``: the field shows discs from now on (a secret)."""
        await self._before_action()
        keyboard = self.page.keyboard
        await self._guard(self.page.mouse.click(x, y))
        if mask and not await self._guard(self.page.evaluate(MASK_FOCUSED)):
            raise ActionError("the secret was not typed: no text field has the focus there (or it is in a frame)")
        await self._guard(keyboard.press("ControlOrMeta+A"))
        if not text:
            await self._guard(keyboard.press("Backspace"))
        elif len(text) > _TYPE_FAST_ABOVE:
            await self._guard(keyboard.insert_text(text))
        else:
            await self._guard(keyboard.type(text))
        if press_enter:
            await self._guard(keyboard.press("Enter"))
        await self.settle()

    async def scroll(self, direction: str) -> None:
        await self._before_action()
        w, h = self.viewport
        dx, dy = {"up": (0, -0.8 * h), "down": (0, 0.8 * h), "left": (-0.8 * w, 0), "right": (0.8 * w, 0)}[direction]
        await self._guard(self.page.mouse.move(w / 2, h / 2))
        await self._guard(self.page.mouse.wheel(dx, dy))
        await self.settle(next_frame=True)

    async def press(self, key: str) -> None:
        await self._before_action()
        await self._guard(self.page.keyboard.press(normalize_key(key)))
        await self.settle(next_frame=True)

    async def select_option(self, x: float, y: float, option: str) -> str:
        """Choose ``option`` in the native select at (x, y); returns the chosen label."""
        await self._before_action()
        found = await self._guard(self.page.evaluate(FIND_SELECT, [x, y, option]))
        if "error" in found:
            raise ActionError(str(found["error"]))
        handle = await self._guard(self.page.evaluate_handle(f"document.elementFromPoint({x}, {y})"))
        element = handle.as_element()
        if element is None:
            raise ActionError("the dropdown disappeared")
        target = await self._guard(
            element.evaluate_handle(
                "el => (el.tagName === 'LABEL' && el.control ? el.control : el).closest('select') "
                "|| el.querySelector('select')"
            )
        )
        select = target.as_element()
        if select is None:
            raise ActionError("the dropdown disappeared")
        await self._guard(select.select_option(index=int(found["index"]), timeout=self._settle_ms()))
        await self.settle()
        return str(found["label"])

    async def wait(self, seconds: float) -> None:
        await asyncio.sleep(seconds)
        await self.settle(next_frame=True)

    # -- settling -------------------------------------------------------------------------
    async def _before_action(self) -> None:
        if self._crashed:
            raise ActionError("the page crashed before the action (its renderer process died); it will be reopened")
        with contextlib.suppress(PlaywrightError, BrowserError):  # subscribe to Page.windowOpen before a tab can open
            await self._cdp_session()
        self._drop_prefetch()
        self._action_events = len(self._events)
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

    async def _guard(self, awaitable: Any) -> Any:
        """Turn Playwright failures during an action into ActionError (or BrowserError if gone)."""
        try:
            return await awaitable
        except PlaywrightTimeoutError:
            raise ActionError(f"the page did not respond within {self.config.settle_timeout_s:g} s") from None
        except PlaywrightError as exc:
            if self._crashed:
                raise ActionError("the page crashed during the action (its renderer process died)") from None
            if self._target_closed(exc):
                if self.browser_crashed:
                    raise BrowserError(f"the browser is gone: {first_line(exc)}") from None
                if await self._closed_itself():
                    return None  # the action closed its own tab (window.close()): settle() moves on
            if self.page.is_closed() and not self.context.pages:
                raise BrowserError(f"the browser page is gone: {first_line(exc)}") from None
            raise ActionError(first_line(exc)) from None

    async def _closed_itself(self) -> bool:
        """Whether the page closed while other tabs of the context stay open (waits briefly for the
        close event, which the driver may report after the failed call)."""
        if not self.page.is_closed():
            with contextlib.suppress(PlaywrightError, TimeoutError):
                await self.page.wait_for_event("close", timeout=1000)
        return self.page.is_closed() and any(not p.is_closed() for p in self.context.pages)

    async def close(self) -> None:
        self._drop_prefetch()
        if self.guard is not None and not self._owns_context:
            await self.guard.uninstall()
        if self._cdp is not None and not self._owns_context:  # a caller's page: no Fetch interception left
            with contextlib.suppress(PlaywrightError):
                await self._cdp.detach()
            self._cdp = None
        if self._owns_page and not self._owns_context:
            with contextlib.suppress(PlaywrightError):
                await self.page.close()
        if self._owns_context:
            with contextlib.suppress(PlaywrightError):
                await self.context.close()
