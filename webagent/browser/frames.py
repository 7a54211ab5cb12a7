"""The element under a viewport point, through iframes (same- and cross-origin) and open shadow roots.

Clicks and keys need nothing of this: Chromium hit-tests a mouse event into the right frame, and
keys go to the focused document. What acts on an element itself does: choosing an option of a
select, giving a file to a file input, masking the field a secret was typed into. ``locate`` walks
from the page's main frame down: the deepest element at the point (into each open shadow root),
and when that is a frame element, on into its frame (Playwright reaches a cross-origin frame in
its own process) with the point moved into the frame's viewport (its content box's corner).
"""

from __future__ import annotations

from dataclasses import dataclass

from playwright.async_api import ElementHandle, Frame, Page

__all__ = ["DEEP_ELEMENT", "FRAME_CORNER", "MAX_FRAME_DEPTH", "Located", "locate"]

#: Frames nested deeper than this are not followed (the element is the frame element there).
MAX_FRAME_DEPTH = 8

#: The deepest element at (x, y) of a document, into open shadow roots.
DEEP_ELEMENT = """([x, y]) => {
  let el = document.elementFromPoint(x, y);
  while (el && el.shadowRoot) {
    const inner = el.shadowRoot.elementFromPoint(x, y);
    if (!inner || inner === el) break;
    el = inner;
  }
  return el;
}"""

#: A frame element's content-box corner in its document's viewport (null for any other element).
FRAME_CORNER = """el => {
  if (el.tagName !== "IFRAME" && el.tagName !== "FRAME") return null;
  const r = el.getBoundingClientRect(), s = getComputedStyle(el);
  return [r.left + el.clientLeft + parseFloat(s.paddingLeft), r.top + el.clientTop + parseFloat(s.paddingTop)];
}"""


@dataclass(frozen=True, slots=True)
class Located:
    """The element at a point, the frame it is in, and the point in that frame's viewport."""

    frame: Frame
    element: ElementHandle | None
    x: float
    y: float
    depth: int  # frames entered (0: the main frame)


async def locate(page: Page, x: float, y: float) -> Located:
    """The element at viewport point (x, y) of ``page`` (None where there is none), through frames
    and open shadow roots. Each call to the page is the caller's to bound."""
    frame, depth = page.main_frame, 0
    while True:
        handle = await frame.evaluate_handle(DEEP_ELEMENT, [x, y])
        element = handle.as_element()
        if element is None:
            return Located(frame, None, x, y, depth)
        corner = await element.evaluate(FRAME_CORNER)
        if corner is None or depth >= MAX_FRAME_DEPTH:
            return Located(frame, element, x, y, depth)
        inner = await element.content_frame()
        if inner is None:  # not loaded yet (or gone): the frame element is what is there
            return Located(frame, element, x, y, depth)
        frame, depth = inner, depth + 1
        x, y = x - float(corner[0]), y - float(corner[1])
