"""A small pool of Chromium processes shared by many sessions (one context each).

Each browser serves at most ``contexts_per_browser`` sessions at once and ``recycle_after``
sessions in its life; then it is retired and closed once its last session ends, so leaks in a
long-running Chromium do not accumulate. A browser that dies is dropped; new sessions get a fresh
one, and ``BrowserSession.browser_crashed`` tells the sessions it carried.

With a remote browser (``browser.ws_endpoint`` / ``cdp_endpoint``) each pooled "browser" is a
connection: recycling closes the connection and opens a new one (a Playwright server launches a
fresh browser for it; over CDP the same browser is reached again), and a lost connection is
replaced by reconnecting for the next session.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

import structlog
from playwright.async_api import Browser, Playwright, async_playwright

from ..config import BrowserConfig
from ..errors import BrowserError
from .launcher import open_browser
from .session import BrowserSession

__all__ = ["BrowserPool"]

log = structlog.get_logger("webagent.browser")


@dataclass(eq=False)
class _Slot:
    browser: Browser
    owned: bool
    active: int = 0
    served: int = 0
    dead: bool = False

    @property
    def retiring(self) -> bool:
        return self.dead or not self.browser.is_connected()


class BrowserPool:
    """Hands out browser sessions; launches, recycles and replaces browsers as needed."""

    def __init__(self, config: BrowserConfig, *, browser: Browser | None = None) -> None:
        self.config = config
        self._playwright: Playwright | None = None
        self._slots: list[_Slot] = []
        self._lock = asyncio.Lock()
        self.launched = 0
        self.crashes = 0
        if browser is not None:
            self._slots.append(_Slot(browser, owned=False))

    @property
    def browsers(self) -> int:
        return sum(1 for s in self._slots if not s.retiring)

    async def _acquire(self) -> _Slot:
        async with self._lock:
            limit, life = self.config.contexts_per_browser, self.config.recycle_after
            for slot in self._slots:
                fresh = slot.owned is False or slot.served < life
                if not slot.retiring and fresh and slot.active < limit:
                    break
            else:
                slot = await self._launch()
            slot.active += 1
            slot.served += 1
            return slot

    async def _launch(self) -> _Slot:
        if self._playwright is None:
            self._playwright = await async_playwright().start()
        browser = await open_browser(self._playwright, self.config)
        slot = _Slot(browser, owned=True)
        browser.on("disconnected", lambda _: self._on_disconnected(slot))
        self._slots.append(slot)
        self.launched += 1
        return slot

    def _on_disconnected(self, slot: _Slot) -> None:
        if not slot.dead:
            slot.dead = True
            self.crashes += 1
            log.warning("browser_disconnected", active_sessions=slot.active)

    async def _release(self, slot: _Slot) -> None:
        slot.active -= 1
        if slot.owned and slot.active == 0 and (slot.dead or slot.served >= self.config.recycle_after):
            if slot in self._slots:
                self._slots.remove(slot)
            slot.dead = True  # closing on purpose is not a crash
            with contextlib.suppress(Exception):
                await slot.browser.close()

    async def start(self) -> None:
        """Launch the first browser now, so a bad executable is one error up front, not one per task."""
        slot = await self._acquire()
        slot.served -= 1  # warming up is not serving a context
        await self._release(slot)

    @contextlib.asynccontextmanager
    async def session(self, *, block_service_workers: bool = False) -> AsyncIterator[BrowserSession]:
        """A new context on a pooled browser, closed on exit."""
        slot = await self._acquire()
        try:
            try:
                session = await BrowserSession.create(
                    slot.browser, self.config, block_service_workers=block_service_workers
                )
            except BrowserError:
                if not slot.retiring:
                    raise
                slot.dead = True  # it died between acquire and use: try a fresh one once
                await self._release(slot)
                slot = await self._acquire()
                session = await BrowserSession.create(
                    slot.browser, self.config, block_service_workers=block_service_workers
                )
            try:
                yield session
            finally:
                await session.close()
        finally:
            await self._release(slot)

    async def aclose(self) -> None:
        for slot in self._slots:
            if slot.owned:
                slot.dead = True
                with contextlib.suppress(Exception):
                    await slot.browser.close()
        self._slots.clear()
        if self._playwright is not None:
            await self._playwright.stop()
            self._playwright = None
