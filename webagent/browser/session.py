"""One browser session: a page in its own context, driven like a user with mouse and keyboard.

After each action the session waits only as long as the page needs: one round trip through the
page's main thread (plus a frame after scrolling), and the load of a navigation or new tab the
action started, capped by ``settle_timeout_s`` (``webagent.browser.settle``). Screenshots are
``webagent.browser.capture``'s, new and closed tabs ``webagent.browser.tabs``'.

Pages that misbehave never hang a run: dialogs (``beforeunload`` included) are accepted, loads
are capped, and downloads, file choosers, failed navigations and renderer crashes are handled
by ``webagent.browser.faults`` (each reported as an event for the policy).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from typing import Any

import structlog
from playwright.async_api import (
    Browser,
    BrowserContext,
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
from ..errors import ActionError, BrowserError, BrowserStuckError, NavigationError
from .capture import ScreenCapture
from .deadline import CommandTimeout, within
from .devtools import CDPChannel, DevToolsSession
from .faults import PageFaults, first_line
from .guard import NavigationGuard
from .scripts import FIND_SELECT, MASK_FOCUSED, PAGE_TEXT
from .settle import Settling
from .tabs import TabFollowing

__all__ = ["BrowserSession"]

log = structlog.get_logger("webagent.browser")

_TYPE_FAST_ABOVE = 64  # longer texts are inserted at once instead of key by key


class BrowserSession(ScreenCapture, TabFollowing, PageFaults, Settling):
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
        self._cdp: CDPChannel | None = None
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
        timeout_s = config.open_timeout_s
        try:
            context = await within(
                browser.new_context(
                    viewport={"width": config.viewport.width, "height": config.viewport.height},
                    device_scale_factor=1,
                    accept_downloads=False,
                    # Requests of service workers bypass routing: a guarded context has none.
                    service_workers="block" if block_service_workers else "allow",
                ),
                timeout_s,
                "new_context",
            )
        except CommandTimeout as exc:
            raise BrowserStuckError(f"cannot open a browser context: {first_line(exc)}") from None
        except PlaywrightError as exc:
            raise BrowserError(f"cannot open a browser context: {first_line(exc)}") from None
        try:
            page = await _new_page(context, timeout_s)
        except BaseException as exc:  # a cancelled open (watchdog, Ctrl-C) closes its context too
            with contextlib.suppress(PlaywrightError):
                await within(context.close(), timeout_s, "context.close")
            if isinstance(exc, CommandTimeout):
                raise BrowserStuckError(f"cannot open a browser tab: {first_line(exc)}") from None
            if isinstance(exc, PlaywrightError):
                raise BrowserError(f"cannot open a browser tab: {first_line(exc)}") from None
            raise
        return cls(page, config, owns_context=True)

    async def _watch_navigations(self) -> None:
        if self.guard is not None and self.guard.active:
            with contextlib.suppress(PlaywrightError):
                await self._cdp_session()  # its Fetch interception watches navigations from now on

    async def set_guard(self, guard: NavigationGuard) -> None:
        """Enforce a navigation policy on this session's context (before its first navigation)."""
        self.guard = guard
        guard.on_event = self._on_guard_event
        try:
            await within(guard.install(self.context), self.config.command_timeout_s, "installing the navigation guard")
        except PlaywrightError as exc:
            raise BrowserError(f"cannot set up the navigation policy: {first_line(exc)}") from None
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

    async def _on_dialog(self, dialog: Dialog) -> None:
        kind = dialog.type
        message = " ".join(dialog.message.split())[:300]
        try:
            accepted = dialog.accept(dialog.default_value) if kind == "prompt" else dialog.accept()
            await within(accepted, self.config.command_timeout_s, "dialog.accept")
        except PlaywrightError:
            return
        text = (
            f"A JavaScript {kind} dialog said: {message!r} (it was accepted)."
            if message
            else (f"A JavaScript {kind} dialog appeared (it was accepted).")
        )
        self._events.append(text)

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
            while True:
                try:
                    await self._goto(url)
                    break
                except PlaywrightTimeoutError:
                    raise
                except PlaywrightError as exc:
                    if not await self._replaced_after_crash_in_load(exc):  # else: the same URL in a new tab
                        raise
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
            await self._load(url)
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
        await self._guard(self._click(x, y))
        await self.settle()

    def _click(self, x: float, y: float) -> Awaitable[None]:
        """Playwright's ``mouse.click``, or the same three mouse events on the direct DevTools session."""
        cdp = self._cdp
        return cdp.click(x, y) if isinstance(cdp, DevToolsSession) else self.page.mouse.click(x, y)

    async def write(self, x: float, y: float, text: str, *, press_enter: bool, mask: bool = False) -> None:
        """Type into the field at (x, y). ``mask``: the field shows discs from now on (a secret)."""
        await self._before_action()
        keyboard = self.page.keyboard
        await self._guard(self._click(x, y))
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

    async def _guard(self, awaitable: Any) -> Any:
        """Turn Playwright failures during an action into ActionError (or BrowserError if gone)."""
        timeout_s = self.config.command_timeout_s
        try:
            return await within(awaitable, timeout_s, "the action")
        except PlaywrightTimeoutError as exc:
            seconds = timeout_s if isinstance(exc, CommandTimeout) else self.config.settle_timeout_s
            raise ActionError(f"the page did not respond within {seconds:g} s") from None
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
        """Undo what the session set up on a caller's page, or close its own tab or context; each
        step bounded (a browser that stopped answering is left to the pool, which closes it)."""
        self._drop_prefetch()
        timeout_s = self.config.open_timeout_s
        if self.guard is not None and not self._owns_context:
            with contextlib.suppress(PlaywrightError):
                await within(self.guard.uninstall(), timeout_s, "removing the navigation guard")
        if self._cdp is not None and not self._owns_context:  # a caller's page: no Fetch interception left
            with contextlib.suppress(PlaywrightError):
                await within(self._cdp.detach(), timeout_s, "CDPSession.detach")
            self._cdp = None
        if self._owns_page and not self._owns_context:
            with contextlib.suppress(PlaywrightError):
                await within(self.page.close(), timeout_s, "page.close")
        if self._owns_context:
            with contextlib.suppress(PlaywrightError):
                await within(self.context.close(), timeout_s, "context.close")


async def _new_page(context: BrowserContext, timeout_s: float) -> Page:
    """A tab in a new context; tried again (at most twice) when its renderer died as it started."""
    for attempt in range(3):
        try:
            return await within(context.new_page(), timeout_s, "new_page")
        except CommandTimeout:
            raise
        except PlaywrightError as exc:
            if attempt == 2 or "crashed" not in str(exc):
                raise
            log.warning("new_tab_crashed", error=first_line(exc))
    raise AssertionError("unreachable")  # pragma: no cover
