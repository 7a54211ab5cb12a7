"""One browser session: a page in its own context, driven like a user with mouse and keyboard.

``BrowserSession`` is what the agent loop drives (``loop.PageDriver``); it is put together from
parts, each given the session's ``PageState`` (``webagent.browser.state``: the current tab, its
CDP session, crash flag, navigation and page events) and the other parts it needs:

* ``TabFollower`` (``tabs``) moves the session to a tab the page opened, or off one it closed;
* ``PageFaults`` (``faults``) handles dialogs, file choosers, failed navigations and renderer
  crashes, and reopens a page in a fresh tab;
* ``PageDownloads`` (``downloads``) keeps the files pages download in the run's folder, or refuses
  them (``[browser] downloads``), within the size, count and time limits;
* ``ScreenCapture`` (``capture``) takes screenshots, and one ahead of time after an action;
* ``Settler`` (``settle``) tracks the main frame's navigations and waits after each action only
  as long as the page needs: one round trip through its main thread (plus a frame after
  scrolling), and the load of a navigation or new tab, capped by ``settle_timeout_s``;
* ``PageControl`` (``control``) opens URLs, goes back, reloads, clicks, types and scrolls;
* ``Pointer`` (``pointer``) clicks holding keys, double and right clicks, hovers, drags, turns the
  wheel over a panel, and counts the elements a list of actions adds or removes.

Pages that misbehave never hang a run: every browser call is bounded (``deadline``), and each
problem becomes an event for the policy.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import structlog
from playwright.async_api import Browser, BrowserContext, Page
from playwright.async_api import Error as PlaywrightError

from ..config import BrowserConfig
from ..errors import BrowserCrashError, BrowserError, BrowserStuckError
from ..files.downloads import DownloadFolder
from ..files.uploads import Upload
from ..guard.secrets import well_formed
from ..images import Frame, Screenshot
from ..records import DownloadedFile, Tab
from .capture import ScreenCapture
from .control import PageControl
from .crashes import browser_failure
from .deadline import CommandTimeout, within
from .devtools import devtools_for
from .downloads import PageDownloads
from .faults import PageFaults
from .guard import NavigationGuard
from .pointer import Pointer
from .scripts import PAGE_TEXT
from .settle import Settler
from .state import PageState, first_line
from .tabs import TabFollower

__all__ = ["BrowserSession"]

log = structlog.get_logger("webagent.browser")


class BrowserSession:
    """A page the agent drives. Create with ``BrowserSession.create`` or wrap an existing page."""

    def __init__(
        self, page: Page, config: BrowserConfig, *, owns_context: bool = False, owns_page: bool = False
    ) -> None:
        self.config = config
        state = self._state = PageState(page, config, owns_context=owns_context, owns_page=owns_page)
        self.viewport = state.viewport
        self._tabs = TabFollower(state)
        self._faults = PageFaults(state, self._tabs)
        self._downloads = PageDownloads(state)
        self._capture = ScreenCapture(state, self._faults)
        self._settler = Settler(state, self._capture, self._tabs, self._downloads)
        self._control = PageControl(state, self._capture, self._settler, self._tabs, self._faults)
        self._pointer = Pointer(state, self._capture, self._settler, self._control)
        self._first_page: Page | None = None  # its target id asked ahead (create), until close

    @classmethod
    async def create(
        cls,
        browser: Browser,
        config: BrowserConfig,
        *,
        guard: NavigationGuard | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> BrowserSession:
        """A fresh context and page on a shared browser. ``guard``: the navigation guard the session
        will get (``set_guard``), whose context options it is made with (no service workers, the
        policy's proxy net: ``NavigationGuard.context_options``); ``options``: the session settings'
        ``new_context`` options (``webagent.browser.context.context_options``: a signed-in state, a
        proxy, a device, ...)."""
        timeout_s = config.open_timeout_s
        guarded = guard.context_options() if guard is not None else {}
        user_proxy = "proxy" in (options or {}) or any(
            a.startswith(("--proxy-server", "--proxy-pac-url")) for a in config.args
        )
        if "proxy" in guarded and user_proxy:
            del guarded["proxy"]  # the user's own proxy stays: no net (docs/security.md)
        try:
            context = await within(
                browser.new_context(
                    **{
                        "viewport": {"width": config.viewport.width, "height": config.viewport.height},
                        "device_scale_factor": 1,
                        **(options or {}),
                        "accept_downloads": config.downloads == "keep",
                        **guarded,
                    }
                ),
                timeout_s,
                "new_context",
            )
        except CommandTimeout as exc:
            raise BrowserStuckError(f"cannot open a browser context: {first_line(exc)}") from None
        except PlaywrightError as exc:
            dead = not browser.is_connected()
            raise browser_failure(exc, "cannot open a browser context", dead=dead) from None
        try:
            page = await _new_page(context, timeout_s)
        except BaseException as exc:  # a cancelled open (watchdog, Ctrl-C) closes its context too
            with contextlib.suppress(PlaywrightError):
                await within(context.close(), timeout_s, "context.close")
            if isinstance(exc, CommandTimeout):
                raise BrowserStuckError(f"cannot open a browser tab: {first_line(exc)}") from None
            if isinstance(exc, PlaywrightError):
                dead = not browser.is_connected()
                raise browser_failure(exc, "cannot open a browser tab", dead=dead) from None
            raise
        session = cls(page, config, owns_context=True)
        devtools = devtools_for(browser) if config.direct_cdp else None
        if devtools is not None:  # its target id, while the start page loads (the first screenshot attaches)
            devtools.prefetch_target(context, page)
            session._first_page = page
        return session

    # -- what the session drives --------------------------------------------------------------
    @property
    def page(self) -> Page:
        """The tab the session drives now (it moves to a tab the page opens, and off one it closes)."""
        return self._state.page

    @property
    def context(self) -> BrowserContext:
        return self._state.context

    @property
    def guard(self) -> NavigationGuard | None:
        return self._state.guard

    async def set_guard(self, guard: NavigationGuard) -> None:
        """Enforce a navigation policy on this session's context (before its first navigation)."""
        await self._state.set_guard(guard)

    async def drive(self, page: Page) -> None:
        """Drive ``page`` of this session's context from now on (a tab another driver, such as a
        run on this page, moved to), with this session's guard watching its navigations."""
        if page is not self._state.page:
            self._state.switch_to(page)
            await self._state.watch_navigations()

    # -- downloads ------------------------------------------------------------------------------
    def keep_downloads(self, folder: DownloadFolder) -> None:
        """Keep the files the pages download in ``folder`` (before the first; ``[browser] downloads``)."""
        self._downloads.keep_in(folder)

    @property
    def downloads(self) -> list[DownloadedFile]:
        """The files kept so far, in the order they ended."""
        return list(self._downloads.kept)

    # -- events and the browser -----------------------------------------------------------------
    def drain_events(self) -> list[str]:
        """Page events since the last call (dialogs, new tabs, crashes, slow loads)."""
        return self._state.drain_events()

    def drain_recoveries(self) -> list[str]:
        """What the session did since the last call to recover from a browser that did not answer."""
        return self._capture.drain_recoveries()

    @property
    def browser_crashed(self) -> bool:
        """Whether the browser under this session disconnected (crashed or was killed)."""
        return self._state.browser_crashed

    @property
    def browser_stuck(self) -> bool:
        """Whether the browser under this session answered neither a command nor a probe (frozen)."""
        return self._state.browser_stuck

    async def confirm_browser_crash(self, timeout_s: float = 2.0) -> bool:
        """Whether the browser died under this session. When a call already failed because its
        target closed, waits up to ``timeout_s`` for the disconnect (the driver may report it later)."""
        browser = self._state.context.browser
        if browser is None or not browser.is_connected():
            return browser is not None
        if not self._state.saw_target_closed:
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
        """The page's URL, a same-document navigation the page made included (``ScreenCapture.url``)."""
        return self._capture.url(self._state.page.url)

    async def title(self) -> str:
        return await self._capture.title()

    async def page_text(self) -> str:
        """The page's visible text and form values (for replay fingerprints; not on the hot path)."""
        try:
            async with asyncio.timeout(5.0):
                text = await self._state.page.evaluate(PAGE_TEXT)
        except (PlaywrightError, TimeoutError):
            return ""
        return well_formed(str(text))  # a page's text may hold a lone surrogate (JavaScript's UTF-16)

    async def screenshot(self, frame: Frame) -> Screenshot:
        """One screenshot, encoded by the browser at the frame's size (``webagent.browser.capture``)."""
        return await self._capture.screenshot(frame)

    def invalidate_capture(self) -> None:
        """Forget the capture taken ahead by the last action (after changing the page directly)."""
        self._capture.drop_prefetch()

    async def discard_capture(self, timeout_s: float = 5.0) -> None:
        """Forget the capture taken ahead by the last action once the browser has answered it (before
        changing the page directly: a capture left pending there would show the page before)."""
        await self._capture.discard_prefetch(timeout_s)

    @property
    def prefetched_shots(self) -> int:
        """Screenshots that were taken by ``settle`` ahead of time (for tests and benchmarks)."""
        return self._capture.prefetched_shots

    @property
    def captures_resent(self) -> int:
        """Screenshots sent again because a navigation committed while they waited."""
        return self._capture.captures_resent

    @property
    def captures_recovered(self) -> int:
        """Screenshots taken again after one did not come."""
        return self._capture.captures_recovered

    @property
    def pages_replaced(self) -> int:
        """Pages reopened in a new tab because they gave no screenshot."""
        return self._capture.pages_replaced

    # -- actions (``webagent.browser.control``) ---------------------------------------------
    async def goto(self, url: str, *, start: bool = False) -> None:
        """Open ``url``. At the start of a run a failure is a NavigationError, later an ActionError."""
        await self._control.goto(url, start=start)

    async def go_back(self) -> None:
        await self._control.go_back()

    async def refresh(self) -> None:
        await self._control.refresh()

    async def click(self, x: float, y: float) -> None:
        await self._control.click(x, y)

    async def write(
        self,
        x: float,
        y: float,
        text: str,
        *,
        press_enter: bool,
        mask: bool = False,
        before_typing: Callable[[list[str]], None] | None = None,
    ) -> None:
        """Type into the field at (x, y). ``mask``: the field shows discs from now on (a secret);
        ``before_typing`` (with ``mask``) is given the URLs of the documents from the field's frame up
        to the top after the click, before any key, and may refuse by raising."""
        await self._control.write(x, y, text, press_enter=press_enter, mask=mask, before_typing=before_typing)

    async def scroll(self, direction: str) -> None:
        await self._control.scroll(direction)

    async def press(self, key: str) -> None:
        await self._control.press(key)

    async def select_option(self, x: float, y: float, option: str) -> str:
        """Choose ``option`` in the native select at (x, y); returns the chosen label."""
        return await self._control.select_option(x, y, option)

    async def wait(self, seconds: float) -> None:
        await self._control.wait(seconds)

    async def upload_file(self, x: float, y: float, file: Upload) -> str:
        """Give ``file`` (the bytes of an allowed file: ``webagent.files.uploads``) to the file input or
        chooser at (x, y)."""
        return await self._control.upload_file(x, y, file)

    # -- more hands (``webagent.browser.pointer``, ``webagent.browser.tabs``) -----------------------
    async def click_with(
        self,
        x: float,
        y: float,
        *,
        button: Literal["left", "right"] = "left",
        count: int = 1,
        modifiers: Sequence[str] = (),
    ) -> None:
        """A click of ``button``, ``count`` times, holding ``modifiers`` (Shift, Control, Alt, Meta)."""
        await self._pointer.click_with(x, y, button=button, count=count, modifiers=modifiers)

    async def hover(self, x: float, y: float) -> None:
        await self._pointer.hover(x, y)

    async def drag(self, x: float, y: float, to_x: float, to_y: float) -> str:
        return await self._pointer.drag(x, y, to_x, to_y)

    async def scroll_at(self, x: float, y: float, direction: str) -> str:
        return await self._pointer.scroll_at(x, y, direction)

    async def tabs(self) -> list[Tab]:
        """The open tabs when there are several, in the order they opened (none read when there is one)."""
        if len(self._tabs.open_pages()) <= 1:
            return []
        return await self._tabs.tabs(await self.title())

    async def switch_tab(self, index: int) -> str:
        """Drive the open tab at ``index``; its outcome."""
        await self._settler.before_action()
        page = await self._tabs.switch(index)
        if page is None:
            return f"tab {index} is the current tab already"
        await self._state.watch_navigations()
        await self._settler.settle(next_frame=True)
        return f"ok, switched to tab {index}"

    async def close_tab(self, index: int) -> str:
        """Close the open tab at ``index`` (never the only one); its outcome."""
        await self._settler.before_action()
        current = self._state.page
        page = await self._tabs.close(index)
        if page is not current:
            await self._state.watch_navigations()
        await self._settler.settle(next_frame=True)
        where = self._tabs.open_pages().index(page) if page in self._tabs.open_pages() else None
        return f"ok, closed tab {index}" + (
            f"; now on tab {where}" if page is not current and where is not None else ""
        )

    async def watch_structure(self) -> None:
        await self._pointer.watch_structure()

    async def structure_changed(self) -> bool:
        return self._pointer.structure_changed()

    async def unwatch_structure(self) -> None:
        await self._pointer.unwatch_structure()

    async def evaluate(self, script: str, arg: object = None) -> object:
        """Run ``script`` (a JavaScript function or expression) in the page, within ``command_timeout_s``;
        a page or browser that cannot answer is a BrowserError, a BrowserCrashError when it is gone (what a
        task reading its own reward from the page needs: ``webagent.loop.task``)."""
        state = self._state
        try:
            return await within(state.page.evaluate(script, arg), self.config.command_timeout_s, "evaluate")
        except CommandTimeout as exc:
            raise BrowserError(f"the page did not answer a script: {first_line(exc)}") from None
        except PlaywrightError as exc:  # a script that throws is the page's; a dead page is a crash
            if state.dead(exc):
                raise BrowserCrashError(f"the page could not run a script: {first_line(exc)}") from None
            raise BrowserError(f"the page could not run a script: {first_line(exc)}") from None

    async def settle(self, *, next_frame: bool = False) -> None:
        """Wait until the page has reacted to the last action, at most ``settle_timeout_s``."""
        await self._settler.settle(next_frame=next_frame)

    # -- closing --------------------------------------------------------------------------
    async def close(self) -> None:
        """Undo what the session set up on a caller's page, or close its own tab or context; each
        step bounded (a browser that stopped answering is left to the pool, which closes it)."""
        state = self._state
        self._capture.drop_prefetch()
        await self._downloads.close()
        if self._first_page is not None:  # closed (or replaced) before its first attach: nothing to attach
            devtools = devtools_for(state.context.browser)
            if devtools is not None:
                devtools.forget_target(self._first_page)
            self._first_page = None
        if state.browser_stuck:  # it answers nothing: the pool retires it and closes it (bounded)
            return
        timeout_s = self.config.open_timeout_s
        if state.guard is not None:  # a caller's context keeps nothing of it; the watcher forgets an own one
            with contextlib.suppress(PlaywrightError):
                await within(state.guard.uninstall(), timeout_s, "removing the navigation guard")
        if not state.owns_context:  # a caller's page: no Fetch interception, no handler of ours left
            await state.detach_cdp()
            state.unlisten()
        if state.owns_page and not state.owns_context:
            with contextlib.suppress(PlaywrightError):
                await within(state.page.close(), timeout_s, "page.close")
        if state.owns_context:
            with contextlib.suppress(PlaywrightError):
                await within(state.context.close(), timeout_s, "context.close")


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
