"""The privileged scripted player of a MiniWoB++ task: it reads the page's DOM to decide, and acts
only through webagent's action space, at points in pixels of the observation's screenshot.

A solver gets a ``Play``. ``play.read(expr, arg)`` evaluates a read-only JavaScript expression in
the task's page (the helpers of ``PRELUDE`` in scope: ``$``, ``$$``, ``txt``, ``goal``, ``fields``, ``quoted``,
``byText``, ...) through the session's bounded ``evaluate``; it never changes the page. Every other
method is one step of ``WebEnv``: ``click``, ``write``, ``press``, ``select``, ``hover``,
``dblclick``, ``drag``, ``scroll`` and ``wait``. An element is named by a JavaScript expression that
evaluates to it (or to a point ``{x, y}`` in CSS pixels of the viewport); the player reads its box
and acts at its centre (or at the first point of a grid over it that hits it, when something
covers the centre), converted to screenshot pixels through the observation's frame and rounded to
whole pixels, as a grounded model's point is.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

from webagent.env import WebEnv
from webagent.env.core import Observation

__all__ = ["PRELUDE", "Ended", "Play", "Stuck"]

#: Helpers every ``read`` has in scope.
PRELUDE = r"""
  const $ = (s, r) => (r || document).querySelector(s);
  const $$ = (s, r) => [...(r || document).querySelectorAll(s)];
  const txt = (e) => (e ? (e.textContent || '') : '').replace(/\s+/g, ' ').trim();
  const utter = core.getUtterance();
  const goal = typeof utter === 'string' ? utter : utter.utterance;
  const fields = (typeof utter === 'object' && utter.fields) || {};
  const quoted = [...goal.matchAll(/"([^"]*)"/g)].map((m) => m[1]);
  const bold = $$('#query span, #query b, #query strong').map(txt);
  const shown = (e) => {
    if (!e || !e.getBoundingClientRect) return false;
    const r = e.getBoundingClientRect(), s = getComputedStyle(e);
    return r.width > 0 && r.height > 0 && s.visibility !== 'hidden' && s.display !== 'none';
  };
  const byText = (sel, t, root) => $$(sel, root).filter(shown).find((e) => txt(e) === t);
  const withText = (sel, t, root) => $$(sel, root).filter(shown).find((e) => txt(e).includes(t));
  const area = () => $('#area');
"""

#: The spot of an element (or a point): its centre in CSS pixels, or the first point of a grid over
#: its visible box where the page hits it; whether that point is on screen and hits it.
SPOT = r"""(target, at) => {
  if (!target) return null;
  if (!(target instanceof Element)) return {x: target.x, y: target.y, hits: true, label: 'a point'};
  const r = target.getBoundingClientRect();
  if (r.width === 0 && r.height === 0) return null;
  // What shows of it: the viewport, narrowed by every ancestor that clips (an option: by its list).
  const list = target.tagName === 'OPTION' ? target.closest('select') : null;
  let top = 0, bottom = innerHeight, left = 0, right = innerWidth;
  for (let e = list || target.parentElement; e && e !== document.body; e = e.parentElement) {
    const s = getComputedStyle(e);
    if (e === list || s.overflowX !== 'visible' || s.overflowY !== 'visible') {
      const b = e.getBoundingClientRect();
      top = Math.max(top, b.top); bottom = Math.min(bottom, b.bottom);
      left = Math.max(left, b.left); right = Math.min(right, b.right);
    }
  }
  const hit = (x, y) => {
    if (x < left || y < top || x >= right || y >= bottom) return false;
    const at = document.elementFromPoint(x, y);
    return !!at && (at === target || target.contains(at) || at === list || (!!at.control && at.control === target));
  };
  // A point and its neighbours a pixel away: a point rounded to the screenshot's pixels still hits.
  const hits = (x, y) => hit(x, y) && hit(x - 1, y) && hit(x + 1, y) && hit(x, y - 1) && hit(x, y + 1);
  const label = (target.tagName.toLowerCase() + ' ' + (target.textContent || target.value || '')
    .replace(/\s+/g, ' ').trim().slice(0, 40)).trim();
  const x = r.left + r.width * (at ? at[0] : 0.5), y = r.top + r.height * (at ? at[1] : 0.5);
  if (hits(x, y)) return {x, y, hits: true, label};
  if (at) return {x, y, hits: false, label, above: y < top, below: y >= bottom};
  // Else the first point of a grid over its box, from the middle out (a sliver left uncovered too).
  const shares = [...Array(25).keys()].map((k) => 0.04 + 0.0384 * k).sort((a, b) => Math.abs(a - 0.5) - Math.abs(b - 0.5));
  for (const fy of shares) for (const fx of shares) {
    const px = r.left + r.width * fx, py = r.top + r.height * fy;
    if (hits(px, py)) return {x: px, y: py, hits: true, label};
  }
  return {x, y, hits: false, label, above: y < top, below: y >= bottom};
}"""


class Ended(Exception):
    """The episode ended (the page's verdict, or truncated); the solver stops."""


class Stuck(Exception):
    """The solver found nothing to do (an element it looked for is not there)."""


@dataclass
class Play:
    """One episode of a task, played through ``env`` (see the module docstring)."""

    env: WebEnv
    obs: Observation
    actions: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    reward: float | None = None
    info: dict[str, Any] = field(default_factory=dict)

    # -- reading --------------------------------------------------------------------------------
    async def read(self, expr: str, arg: Any = None) -> Any:
        """The value of a read-only JavaScript expression in the page (``arg`` in scope)."""
        session = self.env.session
        if session is None:
            raise Ended("the episode is over")
        return await session.evaluate(f"(arg) => {{ {PRELUDE}\n return ({expr}); }}", arg)

    async def spot(self, target: str, arg: Any = None, *, at: tuple[float, float] | None = None) -> dict[str, Any]:
        """Where ``target`` (an expression giving an element or a point) is, in CSS pixels (``at``: that
        point of its box, as fractions of its width and height, instead of its centre); Stuck when absent."""
        found = await self.read(f"({SPOT})({target}, {json.dumps(at)})", arg)
        if not isinstance(found, dict):
            raise Stuck(f"nothing found for {target}")
        return found

    async def until(self, expr: str, arg: Any = None, *, timeout_s: float = 5.0, every_s: float = 0.1) -> Any:
        """Read ``expr`` until it is truthy (the page is still animating); Stuck when it never is."""
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout_s
        while True:
            value = await self.read(expr, arg)
            if value:
                return value
            if loop.time() > end:
                raise Stuck(f"never true: {expr}")
            await asyncio.sleep(every_s)

    # -- acting ---------------------------------------------------------------------------------
    def pixel(self, x: float, y: float) -> tuple[float, float]:
        """A CSS point in whole pixels of the screenshot."""
        ix, iy = self.obs.screenshot.frame.to_image(x, y)
        return float(round(ix)), float(round(iy))

    async def step(
        self, action: dict[str, Any], at: tuple[float, float] | None = None, to: tuple[float, float] | None = None
    ) -> None:
        """One step of the environment; Ended when the episode ends."""
        if self.env.done:
            raise Ended("the episode is over")
        self.actions.append(str(action["action"]))
        point = self.pixel(*at) if at is not None else None
        to_point = self.pixel(*to) if to is not None else None
        obs, reward, terminated, truncated, info = await self.env.step(
            {"action": action}, point=point, to_point=to_point
        )
        self.obs = obs
        if info.get("error"):
            self.errors.append(f"{action['action']}: {info['error']}")
        if terminated or truncated:
            self.reward, self.info = reward, info
            raise Ended(info.get("failure") or info.get("truncated_by") or "ended")

    async def place(
        self, target: str, arg: Any = None, *, hit: bool = True, at: tuple[float, float] | None = None
    ) -> tuple[tuple[float, float], str]:
        """The point of ``target``, scrolled into view first when it is not on screen (``hit``: where
        the page hits it; else its centre, on screen, may be under something else: a drop point)."""
        covered = 0
        for _ in range(20):
            found = await self.spot(target, arg, at=at)
            if found.get("hits") or (not hit and not (found.get("above") or found.get("below"))):
                return (found["x"], found["y"]), str(found.get("label") or "the element")
            if found.get("above") or found.get("below"):
                await self.scroll_to(target, arg, "up" if found.get("above") else "down")
                continue
            covered += 1  # still drawing (an image loading, an animation), or over: wait, look again
            if covered > 10:
                raise Stuck(f"{target} is covered")
            await self.wait(0.1)
        raise Stuck(f"{target} did not come into view")

    async def scroll_to(self, target: str, arg: Any, direction: str) -> None:
        """Turn the wheel toward ``target`` over the panel that holds it (the page when none)."""
        panel = await self.read(
            f"""(() => {{
              let e = ({target});
              e = e && e.parentElement;
              while (e && e !== document.body) {{
                const o = getComputedStyle(e).overflowY;
                if ((o === 'auto' || o === 'scroll') && e.scrollHeight > e.clientHeight) {{
                  const r = e.getBoundingClientRect();
                  return {{x: r.left + r.width / 2, y: r.top + Math.min(r.height / 2, 20)}};
                }}
                e = e.parentElement;
              }}
              return null;
            }})()""",
            arg,
        )
        if isinstance(panel, dict):
            await self.step(
                {"action": "scroll", "direction": direction, "element": "the list"}, (panel["x"], panel["y"])
            )
        else:
            await self.step({"action": "scroll", "direction": direction})

    async def click(self, target: str, arg: Any = None, *, modifiers: list[str] | None = None) -> None:
        at, label = await self.place(target, arg)
        await self.step({"action": "click_element", "element": label, "modifiers": modifiers}, at)

    async def click_at(self, x: float, y: float, what: str = "the spot") -> None:
        await self.step({"action": "click_element", "element": what}, (x, y))

    async def write(
        self, target: str, text: str, arg: Any = None, *, enter: bool = False, at: tuple[float, float] | None = None
    ) -> None:
        """Type ``text`` into the field ``target`` (clicked at its centre, or ``at`` as in ``spot``)."""
        point, label = await self.place(target, arg, at=at)
        await self.step({"action": "write_element", "element": label, "content": text, "press_enter": enter}, point)

    async def select(self, target: str, option: str, arg: Any = None) -> None:
        at, label = await self.place(target, arg)
        await self.step({"action": "select_option", "element": label, "option": option}, at)

    async def hover(self, target: str, arg: Any = None) -> None:
        at, label = await self.place(target, arg)
        await self.step({"action": "hover_element", "element": label}, at)

    async def hover_at(self, x: float, y: float, what: str = "the spot") -> None:
        await self.step({"action": "hover_element", "element": what}, (x, y))

    async def dblclick(self, target: str | dict[str, float], arg: Any = None) -> None:
        """Double-click ``target`` (or a point ``{"x", "y"}`` in CSS pixels)."""
        if isinstance(target, dict):
            await self.step({"action": "double_click_element", "element": "the spot"}, (target["x"], target["y"]))
            return
        at, label = await self.place(target, arg)
        await self.step({"action": "double_click_element", "element": label}, at)

    async def drag(self, source: str, target: str, arg: Any = None, *, by: tuple[float, float] = (0.0, 0.0)) -> None:
        """Drag ``source`` to the centre of ``target`` (moved ``by`` CSS pixels)."""
        at, label = await self.place(source, arg)
        (x, y), where = await self.place(target, arg, hit=False)
        await self.step({"action": "drag_element", "element": label, "target": where}, at, (x + by[0], y + by[1]))

    async def drag_points(self, at: tuple[float, float], to: tuple[float, float], what: str = "the handle") -> None:
        await self.step({"action": "drag_element", "element": what, "target": "the spot"}, at, to)

    async def press(self, key: str) -> None:
        await self.step({"action": "press_key", "key": key})

    async def scroll(self, direction: str, target: str | None = None, arg: Any = None) -> None:
        if target is None:
            await self.step({"action": "scroll", "direction": direction})
            return
        found = await self.spot(target, arg)
        await self.step(
            {"action": "scroll", "direction": direction, "element": found.get("label") or "the panel"},
            (found["x"], found["y"]),
        )

    async def wait(self, seconds: float) -> None:
        await self.step({"action": "wait", "seconds": seconds})
