"""The pointer's other hands: a click with held keys, a double or right click, a hover, a drag, the
wheel over a panel, and the count of elements added or removed that stops a list of actions.

They go through Playwright's mouse and keyboard (plain clicks take the direct DevTools path in
``control``): in Chromium its mouse intercepts a drag the page starts and carries it on with
``Input.dispatchDragEvent``, the one way HTML5 drag-and-drop works without a window system, and its
mouse events carry the keys its keyboard holds. A drag presses on the element, moves to the target
in ``DRAG_STEPS`` steps and releases there, so pages listening to mouse moves, pointer events or
HTML5 drag-and-drop all see it.

What they changed is read cheaply: a drag or a panel's wheel reads the element at the point once
before (its box, or the panel and its offsets), and its state after in the round trip ``settle``
makes anyway (``ScreenCapture.probe``); the other actions read nothing (the next screenshot shows
what a hover or a click opened, and the progress line says whether anything changed).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any, Literal

from ..errors import ActionError, BrowserError
from .capture import ScreenCapture
from .control import PageControl
from .scripts import REAL
from .settle import Settler
from .state import PageState

__all__ = ["DRAG_STEPS", "Pointer"]

#: Mouse moves between a drag's press and its release.
DRAG_STEPS = 8
#: A panel's wheel turns by this share of the panel's size (the page's: of the viewport's).
WHEEL_SHARE = 0.8

_DEEP = """(x, y) => {
  let el = document.elementFromPoint(x, y);
  while (el && el.shadowRoot) {
    const inner = el.shadowRoot.elementFromPoint(x, y);
    if (!inner || inner === el) break;
    el = inner;
  }
  return el;
}"""
# An element in a few words: its tag and its name or (an element of few children) its text.
_LABEL = """(el) => {
  const own = el.childElementCount <= 3 ? el.innerText || el.value || "" : "";
  const text = (el.getAttribute("aria-label") || el.title || own).trim().replace(/\\s+/g, " ");
  return el.tagName.toLowerCase() + (text ? ` "${text.slice(0, 40)}"` : "");
}"""
_STASH = """(key, value) => Object.defineProperty(window, Symbol.for(key), {value, configurable: true})"""
# Read, not taken: a settle whose read came too late leaves the action to read it again (``_after``);
# the next action's stash replaces it.
_PEEK = """(key) => window[Symbol.for(key)]"""

#: The element a drag presses on: its label, and its box kept for the probe after the drop.
DRAG_BEFORE = f"""([x, y]) => {{
  const el = ({_DEEP})(x, y);
  if (!el) return null;
  const r = el.getBoundingClientRect();
  ({_STASH})("webagent.drag", {{el, parent: el.parentElement, left: r.left, top: r.top}});
  return ({_LABEL})(el);
}}"""
DRAG_AFTER = f"""(() => {{
  const s = ({_PEEK})("webagent.drag");
  if (!s) return null;
  if (!s.el.isConnected) return {{gone: true}};
  const r = s.el.getBoundingClientRect();
  return {{dx: Math.round(r.left - s.left), dy: Math.round(r.top - s.top), moved: s.el.parentElement !== s.parent}};
}})()"""

#: The panel a wheel over (x, y) scrolls in ``direction`` (the nearest ancestor that scrolls that way,
#: else the page): its label and size, its offsets kept for the probe after the wheel.
SCROLL_BEFORE = f"""([x, y, direction]) => {{
  let el = ({_DEEP})(x, y);
  if (el && (el.tagName === "IFRAME" || el.tagName === "FRAME")) return {{frame: true}};
  const vertical = direction === "up" || direction === "down";
  const scrolls = (e) => {{
    const o = vertical ? getComputedStyle(e).overflowY : getComputedStyle(e).overflowX;
    const more = vertical ? e.scrollHeight > e.clientHeight : e.scrollWidth > e.clientWidth;
    return (o === "auto" || o === "scroll" || o === "overlay") && more;
  }};
  const top = (e) => !e || e === document.body || e === document.documentElement;
  while (!top(el) && !scrolls(el)) {{
    const root = el.getRootNode();
    el = el.parentElement || (root instanceof ShadowRoot ? root.host : null);
  }}
  const page = top(el), box = page ? document.scrollingElement || document.documentElement : el;
  const size = page ? (vertical ? innerHeight : innerWidth) : (vertical ? el.clientHeight : el.clientWidth);
  ({_STASH})("webagent.wheel", {{box, left: box.scrollLeft, top: box.scrollTop, x: scrollX, y: scrollY}});
  return {{label: page ? null : ({_LABEL})(el), size}};
}}"""
SCROLL_AFTER = f"""(() => {{
  const s = ({_PEEK})("webagent.wheel");
  if (!s) return null;
  return {{dx: Math.round(s.box.scrollLeft - s.left), dy: Math.round(s.box.scrollTop - s.top),
           px: Math.round(scrollX - s.x), py: Math.round(scrollY - s.y)}};
}})()"""

#: Elements added to or removed from the document, counted from ``STRUCTURE_WATCH`` on.
STRUCTURE_WATCH = """() => {
  const key = Symbol.for("webagent.structure"), old = window[key];
  if (old) old.observer.disconnect();
  const state = {count: 0};
  const count = (records) => {
    for (const r of records) for (const n of [...r.addedNodes, ...r.removedNodes]) if (n.nodeType === 1) state.count++;
  };
  state.count_ = count;
  state.observer = new MutationObserver(count);
  state.observer.observe(document, {childList: true, subtree: true});
  Object.defineProperty(window, key, {value: state, configurable: true});
}"""
STRUCTURE_READ = """(() => {
  const s = window[Symbol.for("webagent.structure")];
  if (!s) return null;
  s.count_(s.observer.takeRecords());
  const n = s.count;
  s.count = 0;
  return n;
})()"""
STRUCTURE_UNWATCH = """() => {
  const key = Symbol.for("webagent.structure"), s = window[key];
  if (s) { s.observer.disconnect(); delete window[key]; }
}"""


class Pointer:
    """The pointer actions of a session and the watch over a list of actions, each bounded and settled."""

    def __init__(self, state: PageState, capture: ScreenCapture, settler: Settler, control: PageControl) -> None:
        self._state = state
        self._capture = capture
        self._settler = settler
        self._control = control

    async def click_with(
        self,
        x: float,
        y: float,
        *,
        button: Literal["left", "right"] = "left",
        count: int = 1,
        modifiers: Sequence[str] = (),
    ) -> None:
        """A click (``count`` 2: a double click, click events then dblclick) of ``button``, with
        ``modifiers`` (Playwright's key names) held down during it."""
        await self._settler.before_action()
        page = self._state.page
        guard = self._control.guard
        held: list[str] = []
        try:
            for key in modifiers:
                await guard(page.keyboard.down(key))
                held.append(key)
            if count == 2:
                await guard(page.mouse.dblclick(x, y, button=button))
            else:
                await guard(page.mouse.click(x, y, button=button, click_count=count))
        finally:
            for key in reversed(held):  # never left held for the next action
                with contextlib.suppress(ActionError):
                    await guard(page.keyboard.up(key))
        await self._settler.settle()

    async def hover(self, x: float, y: float) -> None:
        """The pointer moved to (x, y) and left there, until the page has reacted (a frame later)."""
        await self._settler.before_action()
        await self._control.guard(self._state.page.mouse.move(x, y))
        await self._settler.settle(next_frame=True)

    async def drag(self, x: float, y: float, to_x: float, to_y: float) -> str:
        """Press at (x, y), move to (to_x, to_y) in ``DRAG_STEPS`` steps, release there; what moved."""
        await self._settler.before_action()
        page = self._state.page
        guard = self._control.guard
        label = None
        with contextlib.suppress(ActionError):  # a page that cannot say costs only the report
            label = await guard(page.evaluate(DRAG_BEFORE, [x, y]))
        self._capture.probe("drag", DRAG_AFTER if label else None)
        try:
            await guard(page.mouse.move(x, y))
            await guard(page.mouse.down())
            try:
                await guard(page.mouse.move(to_x, to_y, steps=DRAG_STEPS))
            except BaseException:
                with contextlib.suppress(ActionError, BrowserError):  # the button is never left pressed
                    await guard(page.mouse.up())
                raise
            await guard(page.mouse.up())
            await self._settler.settle(next_frame=True)
            after = await self._after("drag", DRAG_AFTER if label else None)
        finally:
            self._capture.probe("drag", None)
        what = str(label) if label else f"from ({x:.0f}, {y:.0f})"
        return _dragged(what, after)

    async def scroll_at(self, x: float, y: float, direction: str) -> str:
        """The wheel turned over (x, y): the panel there scrolls by most of its size; how far it moved."""
        await self._settler.before_action()
        page = self._state.page
        guard = self._control.guard
        found: Any = None
        with contextlib.suppress(ActionError):  # a page that cannot say costs only the report
            found = await guard(page.evaluate(SCROLL_BEFORE, [x, y, direction]))
        found = found if isinstance(found, dict) else {}
        if found.get("frame"):
            w, h = self._state.viewport
            size: float = h if direction in ("up", "down") else w
        else:
            size = float(found.get("size") or 0) or float(self._state.viewport[1])
        step = WHEEL_SHARE * size
        dx, dy = {"up": (0, -step), "down": (0, step), "left": (-step, 0), "right": (step, 0)}[direction]
        self._capture.probe("wheel", SCROLL_AFTER if "size" in found else None)
        try:
            await guard(page.mouse.move(x, y))
            await guard(page.mouse.wheel(dx, dy))
            await self._settler.settle(next_frame=True)
            after = await self._after("wheel", SCROLL_AFTER if "size" in found else None)
        finally:
            self._capture.probe("wheel", None)
        if found.get("frame"):
            return "ok, turned the wheel over a frame"
        return _scrolled(found.get("label"), direction, after)

    async def _after(self, name: str, expression: str | None) -> Any:
        """The probe's value from settle's round trip; read on its own when that read came too late
        (a loaded page or host answers after settle's short wait): the report stays true under load."""
        if expression is None or name in self._capture.probed:
            return self._capture.probed.get(name)
        with contextlib.suppress(ActionError):  # a page that cannot say costs only the report
            after_frame = f"new Promise(r => {REAL}.requestAnimationFrame(() => r({expression})))"
            return await self._control.guard(self._state.page.evaluate(after_frame))
        return None

    # -- a list of actions -----------------------------------------------------------------------
    async def watch_structure(self) -> None:
        """Count elements added or removed from now on, read in each action's settle (``structure_changed``)."""
        with contextlib.suppress(ActionError):
            await self._control.guard(self._state.page.evaluate(STRUCTURE_WATCH))
        self._capture.probe("structure", STRUCTURE_READ)

    def structure_changed(self) -> bool:
        """Whether the last action added or removed elements; True when the page could not tell
        (another document, a read that did not come)."""
        count = self._capture.probed.get("structure")
        return not (isinstance(count, int) and count == 0)

    async def unwatch_structure(self) -> None:
        self._capture.probe("structure", None)
        if not self._state.page.is_closed():
            with contextlib.suppress(ActionError):
                await self._control.guard(self._state.page.evaluate(STRUCTURE_UNWATCH))


def _dragged(what: str, after: Any) -> str:
    if not isinstance(after, dict):
        return f"ok, dragged {what}"
    if after.get("gone"):
        return f"ok, dragged {what}: the page replaced it (it is no longer where it was)"
    dx, dy = int(after.get("dx") or 0), int(after.get("dy") or 0)
    if after.get("moved"):
        return f"ok, dragged {what}: it moved into another container ({dx:+d}, {dy:+d} px)"
    if dx or dy:
        return f"ok, dragged {what}: it moved by ({dx:+d}, {dy:+d}) px"
    return f"dragged {what}, but it did not move"


def _scrolled(label: Any, direction: str, after: Any) -> str:
    what = f"the panel ({label})" if label else "the page"
    if not isinstance(after, dict):
        return f"ok, turned the wheel {direction} there"
    moved = abs(int(after.get("dx") or 0)) + abs(int(after.get("dy") or 0))
    if moved:
        return f"ok, scrolled {what} {direction} by {moved} px"
    page = abs(int(after.get("px") or 0)) + abs(int(after.get("py") or 0))
    if label and page:
        return f"{what} did not move (at its end); the page scrolled {direction} by {page} px instead"
    if label:
        return f"{what} did not move: it is at its end ({direction})"
    return f"nothing there scrolls {direction}: the page did not move (at its end, or no panel under that point)"
