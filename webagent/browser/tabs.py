"""How a browser session follows tabs (mixed into ``BrowserSession``).

A link with ``target=_blank`` or a ``window.open`` announces the new tab over CDP
(``Page.windowOpen``) before it exists; ``settle`` then waits for it and the session switches to
it, as a user would. Under a navigation guard a new tab whose first navigation was refused is
closed and the agent stays where it was. When the current tab closes itself, the session moves to
the last open tab of its context.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

from playwright.async_api import BrowserContext, Page
from playwright.async_api import Error as PlaywrightError

from ..config import BrowserConfig
from .deadline import within
from .devtools import CDPChannel
from .guard import NavigationGuard

__all__ = ["TabFollowing"]


class TabFollowing:
    """New tabs and closed tabs: which page the session drives."""

    # Provided by BrowserSession.
    page: Page
    context: BrowserContext
    config: BrowserConfig
    guard: NavigationGuard | None
    _events: list[str]
    _new_pages: list[Page]
    _cdp: CDPChannel | None
    _nav_committed: asyncio.Event
    _popup_requested: bool
    _new_page_arrived: asyncio.Event

    def _watch(self, page: Page) -> None:
        raise NotImplementedError

    def _invalidate_view(self) -> None:
        raise NotImplementedError

    def _on_new_page(self, page: Page) -> None:
        self._new_pages.append(page)
        self._new_page_arrived.set()

    def _on_window_open(self, _: object) -> None:
        self._popup_requested = True

    async def _switch_to_new_page(self, deadline: float) -> None:
        page = self._new_pages[-1]
        self._new_pages.clear()
        if page.is_closed() or page is self.page:
            return
        if self.guard is not None and self.guard.active:
            blocked = await self._popup_was_blocked(page, deadline)
            if not blocked and not self.guard.every_request and page.url not in ("about:blank", ""):
                # Navigation-only mode has no route to stop a new tab's first request: check where it went.
                reason = await self.guard.refuse(page.url)
                if reason is not None:
                    blocked = True
                    self._events.append(f"Blocked a new tab that opened {page.url}: {reason}.")
            if blocked:
                with contextlib.suppress(PlaywrightError):
                    await within(page.close(), self.config.open_timeout_s, "page.close")
                self._events.append("The blocked tab was closed; the agent stayed on this page.")
                return
        self.page = page
        self._cdp = None
        self._invalidate_view()
        self._nav_committed.clear()
        self._popup_requested = False
        self._watch(page)
        try:
            remaining = max(1.0, (deadline - time.monotonic()) * 1000)
            await page.wait_for_load_state("load", timeout=remaining)
            await within(page.bring_to_front(), self.config.command_timeout_s, "page.bring_to_front")
        except PlaywrightError:
            pass
        self._events.append(f"A new tab opened ({page.url}); the agent switched to it.")

    async def _popup_was_blocked(self, page: Page, deadline: float) -> bool:
        """Whether a new tab's first navigation was refused (it then stays on about:blank)."""
        assert self.guard is not None
        blocked = self.guard.popup_blocked
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
        pages = [p for p in self.context.pages if not p.is_closed()]
        if pages:
            self.page = pages[-1]
            self._cdp = None
            self._invalidate_view()
            self._watch(self.page)
            self._events.append(f"The tab was closed; the agent switched to {self.page.url}.")
