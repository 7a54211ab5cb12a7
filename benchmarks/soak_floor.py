"""One session of the soak's floor: a bare Playwright context doing the agent's browser work.

``FloorSession`` takes a screenshot at the model's size (recovered like the agent does: sent again
when the main frame commits, taken again on a new CDP session, then the page reopened in a new
tab), and carries out a plan's actions (clicks, typing, wheel scrolls, go_back, a new tab
followed), waiting for loads capped like the agent's settle. It counts what happened in the floor's
counters (``AFTER``: capture timeouts by the action before them; ``FAILED``: failed actions by their
error). ``soak.floor`` runs N of them.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time
from typing import Any

from playwright.async_api import Error as PlaywrightError
from soak_tasks import Act
from soaksite.server import ELEMENTS, VIEWPORT

from webagent.browser.scripts import TWO_FRAMES, VIEW_AFTER_FRAME, VIEW_NOW
from webagent.config import BrowserConfig

__all__ = ["AFTER", "CAPTURE_S", "COMMAND_S", "FAILED", "NAVIGATION_S", "SETTLE_S", "FloorSession"]

SETTLE_S = BrowserConfig().settle_timeout_s  # the agent's cap on waiting for a load after an action
CAPTURE_S = BrowserConfig().capture_timeout_s
AFTER = "capture timeout after: "  # floor counters: capture timeouts by the action before them
FAILED = "failed: "  # floor counters: failed actions by their error
COMMAND_S = BrowserConfig().command_timeout_s
NAVIGATION_S = BrowserConfig().navigation_timeout_s


class FloorSession:
    """One bare session: a context, its current page and CDP session, and the scroll offsets."""

    def __init__(self, browser: Any, frame: Any, config: BrowserConfig, counts: collections.Counter[str]) -> None:
        self.browser, self.frame, self.config, self.counts = browser, frame, config, counts
        self.scroll = (0.0, 0.0)
        self.last = "the start page"  # the action before the next screenshot
        #: Tabs that opened after the wait for them was over (a loaded machine): followed after the
        #: next action, as the agent's TabFollower does, so the floor renders every page the agent does.
        self.late: list[Any] = []

    def _on_page(self, page: Any) -> None:
        self.late.append(page)

    def _own(self, page: Any) -> Any:
        """``page``, opened by the session itself (not a tab the site opened)."""
        self.late = [p for p in self.late if p is not page]
        return page

    async def open(self, url: str) -> None:
        self.context = await self.browser.new_context(
            viewport={"width": VIEWPORT[0], "height": VIEWPORT[1]}, device_scale_factor=1
        )
        self.context.on("page", self._on_page)
        self.page = self._own(await self.context.new_page())
        try:
            await self.page.goto(url, wait_until="load", timeout=30_000)
        except PlaywrightError:
            self.counts["loads_capped"] += 1
        self.cdp = await self.context.new_cdp_session(self.page)

    def _params(self) -> dict[str, Any]:
        return {
            "format": "jpeg",
            "quality": self.config.jpeg_quality,
            "optimizeForSpeed": True,
            "clip": {
                "x": self.scroll[0],
                "y": self.scroll[1],
                "width": self.frame.css_width,
                "height": self.frame.css_height,
                "scale": self.frame.scale,
            },
        }

    async def shoot(self) -> None:
        """Page.captureScreenshot at the model's size (what the agent sends), recovered like the agent
        does: retried on a frame not ready yet; when it does not come within the agent's capture
        timeout, taken again on a new CDP session, and if that does not come either, the page is
        reopened in a new tab (its timed-out captures go with the old one) and shot once more."""
        timeouts = 0
        for attempt in range(4):
            try:
                async with asyncio.timeout(CAPTURE_S):
                    await self._capture()
                if timeouts:
                    self.counts["capture_retaken" if timeouts == 1 else "capture_after_reopen"] += 1
                return
            except TimeoutError:
                timeouts += 1
                self.counts["capture_timeouts"] += 1
                self.counts[f"{AFTER}{self.last}"] += 1
                if timeouts == 3:
                    break
                with contextlib.suppress(PlaywrightError, TimeoutError):
                    if timeouts == 2:
                        async with asyncio.timeout(NAVIGATION_S + COMMAND_S):
                            await self._reopen()
                    async with asyncio.timeout(COMMAND_S):
                        self.cdp = await self.context.new_cdp_session(self.page)
            except PlaywrightError:
                if attempt == 3:
                    break
                with contextlib.suppress(PlaywrightError, TimeoutError):
                    async with asyncio.timeout(0.5):
                        await self.page.evaluate(TWO_FRAMES)
        self.counts["captures_failed"] += 1

    async def _capture(self) -> None:
        """One capture, sent again when the main frame commits while it waits: Chromium never answers
        such a capture (docs/faults.md), and a bare loop that knows it does what the agent does."""
        page = self.page
        for _ in range(4):
            committed = asyncio.Event()

            def on_navigated(frame: Any, page: Any = page, committed: asyncio.Event = committed) -> None:
                if frame == page.main_frame:
                    committed.set()

            page.on("framenavigated", on_navigated)
            capture = asyncio.ensure_future(self.cdp.send("Page.captureScreenshot", self._params()))
            commit = asyncio.ensure_future(committed.wait())
            try:
                await asyncio.wait({capture, commit}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                page.remove_listener("framenavigated", on_navigated)
                commit.cancel()
                if not capture.done():
                    capture.cancel()
            if capture.done() and not capture.cancelled():
                capture.result()  # raises its PlaywrightError
                return
            self.counts["capture_resent"] += 1
            with contextlib.suppress(asyncio.CancelledError, PlaywrightError):
                await capture

    async def _reopen(self) -> None:
        """The agent's last resort: a new tab at the page's URL in place of the page (closed)."""
        self.counts["pages_replaced"] += 1
        old, url = self.page, self.page.url
        self.page = self._own(await self.context.new_page())
        self.scroll = (0.0, 0.0)
        with contextlib.suppress(PlaywrightError, TimeoutError):
            async with asyncio.timeout(COMMAND_S):
                await old.close()
        try:
            await self.page.goto(url, wait_until="load", timeout=NAVIGATION_S * 1000)
        except PlaywrightError:
            self.counts["loads_capped"] += 1

    async def view(self, after_frame: bool) -> None:
        """The scroll offsets, read like the agent's settle does (one Runtime.evaluate, capped at 0.5 s)."""
        expression = VIEW_AFTER_FRAME if after_frame else VIEW_NOW
        try:
            async with asyncio.timeout(0.5):
                reply = await self.cdp.send(
                    "Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True}
                )
            x, y, *_ = reply["result"]["value"]
            self.scroll = (float(x), float(y))
        except (PlaywrightError, TimeoutError, KeyError, TypeError, ValueError):
            self.scroll = (0.0, 0.0)

    async def _navigating(self, action: Any) -> None:
        """Run ``action`` and wait for the navigation it starts and its load, capped like the agent's settle."""
        try:
            async with self.page.expect_navigation(wait_until="load", timeout=SETTLE_S * 1000):
                await action()
        except PlaywrightError:  # timeouts included: a slow page, a page that never fires load
            self.counts["loads_capped"] += 1

    async def act(self, act: Act, index: int) -> None:
        kind, arg = act
        page = self.page
        if kind == "click" and arg == "new tab link":
            deadline = time.monotonic() + SETTLE_S
            try:
                async with self.context.expect_page(timeout=SETTLE_S * 1000) as info:
                    await page.mouse.click(*ELEMENTS[arg])
                await info.value
            except PlaywrightError:
                self.counts["tabs_late"] += 1  # followed after the next action, if it ever opens
            else:
                await self._follow(deadline)
        elif kind == "click":
            await self._navigating(lambda: page.mouse.click(*ELEMENTS[arg]))
        elif kind == "write":
            await page.mouse.click(*ELEMENTS[arg])
            await page.keyboard.press("ControlOrMeta+A")
            await page.keyboard.type(f"soak {index}")
            await self._navigating(lambda: page.keyboard.press("Enter"))
        elif kind == "scroll":
            w, h = VIEWPORT
            await page.mouse.move(w / 2, h / 2)
            await page.mouse.wheel(0, 0.8 * h)
        elif kind == "back":
            try:
                await page.go_back(wait_until="load", timeout=SETTLE_S * 1000)
            except PlaywrightError:
                self.counts["loads_capped"] += 1
        if self.late and not (kind == "click" and arg == "new tab link"):
            await self._follow(time.monotonic() + SETTLE_S)  # a tab that opened late: followed now
        await self.view(after_frame=kind == "scroll")

    async def _follow(self, deadline: float) -> None:
        """Move to the newest tab the page opened (its load awaited up to ``deadline``)."""
        if not self.late:
            return
        new, self.late = self.late[-1], []
        if new.is_closed():
            return
        with contextlib.suppress(PlaywrightError):
            await new.wait_for_load_state("load", timeout=max(1.0, (deadline - time.monotonic()) * 1000))
        with contextlib.suppress(PlaywrightError):
            await new.bring_to_front()
        self.page = new
        self.cdp = await self.context.new_cdp_session(new)
        self.counts["tabs_followed"] += 1
