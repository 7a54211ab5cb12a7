"""A page's frames of other origins, reached through Playwright's own ``Frame``.

A script the page runs stops at a frame of another origin: its document is not the script's to read
(``contentDocument`` is null), and with site isolation it lives in another renderer process. What
reads a page whole (the shell's refs) runs its script in each such frame through Playwright, which
reaches a frame in another process too, and adds the frame's place in the page to the points read
there. ``FarFrame`` is one such frame: its script's results, the frames of other origins inside it
(the elements a script of the caller's names, in its order), and where its content box is in the
page's viewport. What reads the page at a point (the shell's receipts) finds the innermost frame
there (``at``: frames of any origin, as ``frames.locate`` walks them) and runs its script in that
frame on the point moved into its viewport. Every call has the deadline it is given; a frame that does not answer, or is gone
(detached, navigated away), is a ``BrowserError`` naming it, for the caller to skip or report.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import Awaitable
from typing import TypeVar

from playwright.async_api import ElementHandle, Frame, JSHandle, Page
from playwright.async_api import Error as PlaywrightError

from ..errors import BrowserError
from .deadline import CommandTimeout, within
from .frames import DEEP_ELEMENT, FRAME_CORNER, MAX_FRAME_DEPTH
from .state import first_line

__all__ = ["FarFrame"]

T = TypeVar("T")

#: A frame element's border and padding: its content box's corner from its border box's.
_INSET = """el => {
  const s = getComputedStyle(el);
  return [el.clientLeft + parseFloat(s.paddingLeft), el.clientTop + parseFloat(s.paddingTop)];
}"""


class FarFrame:
    """One frame of a page (its main frame, or one of another origin inside it), every call within
    ``timeout_s`` and, with ``until`` (the event loop's clock), over by then: the frames found
    through it share it, so that a page of many frames that do not answer is still read in time."""

    def __init__(self, frame: Frame, timeout_s: float, until: float | None = None) -> None:
        self.frame = frame
        self.timeout_s = timeout_s
        self.until = until

    @classmethod
    def main(cls, page: Page, timeout_s: float, *, total_s: float | None = None) -> FarFrame:
        """The page's main frame; ``total_s``: every call through it and its frames over by then."""
        until = asyncio.get_running_loop().time() + total_s if total_s is not None else None
        return cls(page.main_frame, timeout_s, until)

    @property
    def is_main(self) -> bool:
        return self.frame.parent_frame is None

    @property
    def url(self) -> str:
        return self.frame.url

    async def evaluate(self, script: str, arg: object = None) -> object:
        """``script`` run in this frame's document (BrowserError when it does not answer or is gone)."""
        return await self._call(self.frame.evaluate(script, arg), "evaluate")

    async def children(self, script: str) -> list[FarFrame | None]:
        """The frames of the frame elements ``script`` gives (an array, evaluated in this frame), in
        its order; None for one with no document loaded."""
        handle = await self._call(self.frame.evaluate_handle(script), "evaluate_handle")
        items: dict[str, JSHandle] = {}
        try:
            items = await self._call(handle.get_properties(), "get_properties")
            found: list[FarFrame | None] = []
            for key in sorted((k for k in items if k.isdigit()), key=int):
                element = items[key].as_element()
                inner = await self._call(element.content_frame(), "content_frame") if element else None
                found.append(FarFrame(inner, self.timeout_s, self.until) if inner is not None else None)
            return found
        finally:  # the page keeps what a handle holds until it is let go (its own deadline: even past `until`)
            for held in [handle, *items.values()]:
                with contextlib.suppress(PlaywrightError):
                    await within(held.dispose(), self.timeout_s, "frame.dispose")

    async def corner(self, *, into_view: bool = False) -> tuple[float, float] | None:
        """Where this frame's content box starts in the page's viewport (0, 0 for the main frame),
        its frame element scrolled into view first with ``into_view``; None when it shows nowhere."""
        if self.is_main:
            return (0.0, 0.0)
        element = await self._element()
        if into_view:
            ms = self.timeout_s * 1000
            await self._call(element.scroll_into_view_if_needed(timeout=ms), "scroll_into_view_if_needed")
        box = await self._call(element.bounding_box(), "bounding_box")
        if box is None:
            return None
        inset = await self._call(element.evaluate(_INSET), "evaluate")
        return box["x"] + float(inset[0]), box["y"] + float(inset[1])

    async def in_parent(self, script: str, x: float, y: float) -> object:
        """``script`` run in the parent frame on (this frame's element, [px, py]), where (px, py) is
        page viewport point (x, y) in the parent's viewport (None for the main frame)."""
        parent = self.frame.parent_frame
        if parent is None:
            return None
        corner = await FarFrame(parent, self.timeout_s, self.until).corner()
        if corner is None:
            return None
        element = await self._element()
        return await self._call(element.evaluate(script, [x - corner[0], y - corner[1]]), "evaluate")

    async def at(self, x: float, y: float) -> tuple[FarFrame, float, float]:
        """The innermost frame at point (x, y) of this frame's viewport (into frames of any origin and
        open shadow roots, as ``webagent.browser.frames.locate`` goes), and the point in its viewport."""
        frame = self
        for _ in range(MAX_FRAME_DEPTH):
            handle = await frame._call(frame.frame.evaluate_handle(DEEP_ELEMENT, [x, y]), "evaluate_handle")
            try:
                element = handle.as_element()
                if element is None:
                    break
                corner = await frame._call(element.evaluate(FRAME_CORNER), "evaluate")
                inner = await frame._call(element.content_frame(), "content_frame") if corner is not None else None
            finally:
                with contextlib.suppress(PlaywrightError):
                    await within(handle.dispose(), self.timeout_s, "frame.dispose")
            if inner is None:  # not a frame element, or its frame not loaded: this frame holds the point
                break
            frame = FarFrame(inner, self.timeout_s, self.until)
            x, y = x - float(corner[0]), y - float(corner[1])
        return frame, x, y

    async def _element(self) -> ElementHandle:
        return await self._call(self.frame.frame_element(), "frame_element")

    async def _call(self, awaitable: Awaitable[T], what: str) -> T:
        seconds = self.timeout_s
        if self.until is not None:
            seconds = min(seconds, max(0.0, self.until - asyncio.get_running_loop().time()))
        try:
            if seconds <= 0:
                if inspect.iscoroutine(awaitable):
                    awaitable.close()
                raise CommandTimeout(f"frame.{what}: the page's read is out of time")
            return await within(awaitable, seconds, f"frame.{what}")
        except CommandTimeout as exc:
            raise BrowserError(f"a frame of the page did not answer: {first_line(exc)}") from None
        except PlaywrightError as exc:  # detached, navigated away, its process gone
            raise BrowserError(f"a frame of the page could not be read: {first_line(exc)}") from None
