"""How a browser session follows tabs: which page it drives.

A link with ``target=_blank`` or a ``window.open`` announces the new tab over CDP
(``Page.windowOpen``) before it exists; ``settle`` then waits for it and the session switches to
it, as a user would. Under a navigation guard a new tab whose first navigation was refused is
closed and the agent stays where it was. When the current tab closes itself, the session moves to
the last open tab of its context.

The policy sees the open tabs when there are several (``tabs``: index, title, URL, in the order
they opened) and moves between them (``switch``) or closes one (``close``). The only tab left is
never closed: a session always drives a page (``goto`` leaves one instead).
"""

from __future__ import annotations

import asyncio
import contextlib
import time

from playwright.async_api import Error as PlaywrightError
from playwright.async_api import Page

from ..errors import ActionError
from ..guard.secrets import well_formed
from ..records import Tab
from .deadline import within
from .devsession import DevToolsSession
from .state import PageState

__all__ = ["TabFollower"]

#: Seconds a tab the agent does not drive gets to give its title (one that does not answer shows none).
TITLE_S = 1.0
#: A tab's title is listed on one line, cut to this many characters (a page's own text: it may hold
#: line breaks that would pass for lines of the prompt).
TITLE_CHARS = 80


class TabFollower:
    """New tabs and closed tabs: the tabs of the context the session has not switched to yet."""

    def __init__(self, state: PageState) -> None:
        self._state = state
        self._new_pages: list[Page] = []  # opened in the context since the session last looked
        self._popup_requested = False  # CDP Page.windowOpen: a new tab is on its way
        self._new_page_arrived = asyncio.Event()
        state.listen(state.context, "page", self._on_new_page)
        state.on_cdp("Page.windowOpen", self._on_window_open)

    def _on_new_page(self, page: Page) -> None:
        self._new_pages.append(page)
        self._new_page_arrived.set()

    def _on_window_open(self, _: object) -> None:
        self._popup_requested = True

    @property
    def pending(self) -> bool:
        """Whether a new tab opened, or is on its way, that the session has not switched to."""
        return self._popup_requested or bool(self._new_pages)

    def reset(self) -> None:
        """Before an action: no new tab asked for yet."""
        self._popup_requested = False
        self._new_page_arrived.clear()

    def forget(self, page: Page) -> None:
        """``page`` was opened by the session itself (in place of a crashed one), not by the page."""
        self._new_pages = [p for p in self._new_pages if p is not page]

    async def follow(self, deadline: float) -> None:
        """After an action: move to the tab it opened, or off the tab it closed."""
        page = self._state.page
        cdp = self._state.cdp
        if isinstance(cdp, DevToolsSession) and cdp.gone and not page.is_closed():
            # The tab closed itself (window.close()): DevTools says so a moment before Playwright.
            with contextlib.suppress(PlaywrightError):
                await page.wait_for_event("close", timeout=1000)
        if self._popup_requested and not self._new_pages:
            # The page asked for a new tab (link with target=_blank, window.open): wait for it.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                    await self._new_page_arrived.wait()
        if self._new_pages:
            await self._switch_to_new_page(deadline)
        elif self._state.page.is_closed():
            self._switch_to_open_page()

    async def _switch_to_new_page(self, deadline: float) -> None:
        state = self._state
        page = self._new_pages[-1]
        self._new_pages.clear()
        if page.is_closed() or page is state.page:
            return
        guard = state.guard
        if guard is not None and guard.active and await self._refused(page, deadline):
            with contextlib.suppress(PlaywrightError):
                await within(page.close(), state.config.open_timeout_s, "page.close")
            state.report("The blocked tab was closed; the agent stayed on this page.")
            return
        state.switch_to(page)
        state.nav.expect_commit()
        self._popup_requested = False
        try:
            remaining = max(1.0, (deadline - time.monotonic()) * 1000)
            await page.wait_for_load_state("load", timeout=remaining)
            await within(page.bring_to_front(), state.config.command_timeout_s, "page.bring_to_front")
        except PlaywrightError:
            pass
        state.report(f"A new tab opened ({page.url}); the agent switched to it.")

    async def _refused(self, page: Page, deadline: float) -> bool:
        """Whether a new tab must not be driven: its first navigation was refused, or it is on a page
        the policy refuses however it got there (a redirect, a request before the guard saw the tab).
        Checked once its document has loaded, before the session moves to it."""
        guard = self._state.guard
        assert guard is not None
        if await self._popup_was_blocked(page, deadline):
            return True
        with contextlib.suppress(PlaywrightError):
            remaining = max(0.05, deadline - time.monotonic())
            await page.wait_for_load_state("domcontentloaded", timeout=remaining * 1000)
        url = page.url
        if url.startswith("chrome-error:"):  # where it failed to go (refused below the guard: the proxy net)
            url = await self._failed_url(page) or ""
        if url in ("about:blank", ""):
            return False
        reason = await guard.refuse(url)
        if reason is not None:
            self._state.report(f"Blocked a new tab that opened {url}: {reason}.")
        return reason is not None

    async def _failed_url(self, page: Page) -> str | None:
        """The URL a tab showing Chromium's error page failed to open (its history entry keeps it)."""
        timeout_s = self._state.config.command_timeout_s
        try:
            cdp = await within(self._state.context.new_cdp_session(page), timeout_s, "new_cdp_session")
            try:
                history = await within(cdp.send("Page.getNavigationHistory"), timeout_s, "Page.getNavigationHistory")
            finally:
                with contextlib.suppress(PlaywrightError):
                    await within(cdp.detach(), timeout_s, "CDPSession.detach")
        except PlaywrightError:
            return None
        entries = history.get("entries", [])
        index = int(history.get("currentIndex", -1))
        return str(entries[index].get("url", "")) if 0 <= index < len(entries) else None

    async def _popup_was_blocked(self, page: Page, deadline: float) -> bool:
        """Whether a new tab's first navigation was refused (it then stays on about:blank)."""
        assert self._state.guard is not None
        blocked = self._state.guard.popup_blocked
        if not blocked.is_set() and page.url in ("about:blank", ""):
            remaining = max(0.05, deadline - time.monotonic())
            load = asyncio.ensure_future(page.wait_for_load_state("domcontentloaded", timeout=remaining * 1000))
            refused = asyncio.ensure_future(blocked.wait())
            try:
                await asyncio.wait({load, refused}, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
            finally:  # cancelled too (a watchdog, max_time): neither wait is left behind
                for task in (load, refused):
                    task.cancel()
                await asyncio.gather(load, refused, return_exceptions=True)
        was_blocked = blocked.is_set() and (page.url in ("about:blank", "") or page.url.startswith("chrome-error:"))
        blocked.clear()
        return was_blocked

    def _switch_to_open_page(self) -> None:
        pages = [p for p in self._state.context.pages if not p.is_closed()]
        if pages:
            self._state.switch_to(pages[-1])
            self._state.report(f"The tab was closed; the agent switched to {pages[-1].url}.")

    async def closed_itself(self) -> bool:
        """Whether the page closed while other tabs of the context stay open (waits briefly for the
        close event, which the driver may report after the failed call)."""
        page = self._state.page
        if not page.is_closed():
            with contextlib.suppress(PlaywrightError, TimeoutError):
                await page.wait_for_event("close", timeout=1000)
        return page.is_closed() and any(not p.is_closed() for p in self._state.context.pages)

    # -- the policy's tabs ----------------------------------------------------------------------
    def open_pages(self) -> list[Page]:
        """The context's open tabs, in the order they opened."""
        return [p for p in self._state.context.pages if not p.is_closed()]

    async def tabs(self, current_title: str) -> list[Tab]:
        """The open tabs when there are several (none when there is one: nothing is read then)."""
        pages = self.open_pages()
        if len(pages) <= 1:
            return []
        titles = await asyncio.gather(*(self._title(p, current_title) for p in pages))
        current = self._state.page
        return [
            Tab(index=i, title=" ".join(title.split())[:TITLE_CHARS], url=page.url, current=page is current)
            for i, (page, title) in enumerate(zip(pages, titles, strict=True))
        ]

    async def _title(self, page: Page, current_title: str) -> str:
        if page is self._state.page:
            return current_title
        try:
            async with asyncio.timeout(TITLE_S):
                return well_formed(await page.title())
        except (PlaywrightError, TimeoutError):
            return ""

    def page_at(self, index: int) -> Page:
        """The open tab at ``index``; an ActionError naming the tabs there are."""
        pages = self.open_pages()
        if not 0 <= index < len(pages):
            there = f"tabs 0 to {len(pages) - 1}" if len(pages) > 1 else "only tab 0"
            raise ActionError(f"there is no tab {index}: there are {there}")
        return pages[index]

    async def switch(self, index: int) -> Page | None:
        """Drive the tab at ``index`` (brought to the front); None when it is the current one already."""
        page = self.page_at(index)
        if page is self._state.page:
            return None
        self._new_pages = [p for p in self._new_pages if p is not page]
        self._state.switch_to(page)
        with contextlib.suppress(PlaywrightError):
            await within(page.bring_to_front(), self._state.config.command_timeout_s, "page.bring_to_front")
        return page

    async def close(self, index: int) -> Page:
        """Close the tab at ``index`` (not the only one left); the session moves to the last tab
        left when it drove that one. Returns the tab it drives then."""
        page = self.page_at(index)
        if len(self.open_pages()) == 1:
            raise ActionError("close_tab refused: it is the only tab open (use goto to leave this page)")
        timeout_s = self._state.config.open_timeout_s
        try:
            await within(page.close(), timeout_s, "page.close")
        except PlaywrightError as exc:
            raise ActionError(f"the tab did not close: {str(exc).splitlines()[0]}") from None
        if page is self._state.page:
            left = self.open_pages()
            self._state.switch_to(left[-1])
            with contextlib.suppress(PlaywrightError):
                await within(left[-1].bring_to_front(), self._state.config.command_timeout_s, "page.bring_to_front")
        return self._state.page
