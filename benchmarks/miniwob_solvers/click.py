"""Clicks: buttons, links, checkboxes, colours, dialogs, collapsible sections, points on a drawing."""

from __future__ import annotations

import asyncio
import math
import time

from .play import Play, Stuck
from .registry import solves

#: Nothing animates any more (jQuery's animations, and CSS transitions it runs).
STILL = "typeof jQuery === 'undefined' || jQuery(':animated').length === 0"


async def still(p: Play) -> None:
    await p.until(STILL)


@solves("click-button")
async def click_button(p: Play) -> None:
    await p.click("byText('#area button', quoted[0])")


@solves("click-link")
async def click_link(p: Play) -> None:
    await p.click("byText('#area span.alink', quoted[0])")


@solves("click-button-sequence")
async def click_button_sequence(p: Play) -> None:
    await p.click("$('#subbtn')")
    await p.click("$('#subbtn2')")


@solves("button-delay")
async def button_delay(p: Play) -> None:
    seconds = float(await p.read("goal.match(/wait (\\d+) seconds/)[1]"))
    (x, y), _ = await p.place("$('#subbtn')")
    started = time.monotonic()  # the click goes out at once, its step returns after the page settled
    await p.click_at(x, y, "button ONE")
    await p.wait(max(seconds - 0.5, 0.0))
    # The rest of the delay as the policy's thinking time, so the second click lands on time.
    await asyncio.sleep(max(seconds - (time.monotonic() - started) - 0.02, 0.0))
    await p.click("$('#subbtn2')")


CHECKBOXES = """(() => {
  const m = goal.match(/^Select (.*) and click Submit\\.$/);
  const names = m[1] === 'nothing' ? [] : m[1].split(', ');
  return $$('#area label').map((l, i) => names.includes(txt(l)) ? i : -1).filter((i) => i >= 0);
})()"""


@solves("click-checkboxes", "click-checkboxes-large", "click-checkboxes-transfer")
async def click_checkboxes(p: Play) -> None:
    for i in await p.read(CHECKBOXES):
        await p.click("$$('#area label')[arg].querySelector('input')", i)
    await p.click("$('#subbtn')")


SIMILAR = """(() => {
  const names = goal.match(/^Select words similar to (.*) and click Submit\\.$/)[1].split(', ');
  const group = (w) => SYNONYMS.findIndex((g) => g.includes(w));
  const wanted = names.map(group);
  return $$('#boxes label').map((l, i) => wanted.includes(group(txt(l))) ? i : -1).filter((i) => i >= 0);
})()"""


@solves("click-checkboxes-soft")
async def click_checkboxes_soft(p: Play) -> None:
    for i in await p.read(SIMILAR):
        await p.click("$$('#boxes label')[arg].querySelector('input')", i)
    await p.click("$('#subbtn')")


@solves("click-collapsible", "click-collapsible-nodelay")
async def click_collapsible(p: Play) -> None:
    await p.click("$('#area h3')")
    await still(p)
    await p.click("$('#subbtn')")


@solves("click-collapsible-2", "click-collapsible-2-nodelay")
async def click_collapsible_2(p: Play) -> None:
    link = "$$('#area .alink').find((a) => txt(a) === quoted[0])"
    await p.click(f"{link}.parentElement.previousElementSibling")
    await still(p)
    await p.click(link)


@solves("click-color")
async def click_color(p: Play) -> None:
    await p.click("$$('#area .color').find((d) => goal.includes(' ' + d.dataset.color + ' '))")


@solves("click-dialog")
async def click_dialog(p: Play) -> None:
    await p.click("$('.ui-dialog-titlebar button')")


@solves("click-dialog-2")
async def click_dialog_2(p: Play) -> None:
    if await p.read("quoted[0] === 'x'"):
        await p.click("$('.ui-dialog-titlebar button')")
    else:
        await p.click("byText('.ui-dialog-buttonpane button', quoted[0])")


@solves("ascending-numbers")
async def ascending_numbers(p: Play) -> None:
    await p.click("$$('svg text').find((t) => txt(t) === '1')")
    # The numbers are then hidden under squares; the next one is always the first square.
    for _ in range(5):
        await p.click("$('svg rect')")


def _inside(points: dict[str, list[float]]) -> tuple[float, float]:
    """A point on the bisector of the angle at ``v`` between ``a`` and ``b``, inside the drawing."""
    (vx, vy), (ax, ay), (bx, by) = points["v"], points["a"], points["b"]
    left, top, right, bottom = points["box"]
    ua, ub = math.hypot(ax - vx, ay - vy), math.hypot(bx - vx, by - vy)
    dx, dy = (ax - vx) / ua + (bx - vx) / ub, (ay - vy) / ua + (by - vy) / ub
    norm = math.hypot(dx, dy) or 1.0
    for t in (30, 22, 15, 10, 6):
        x, y = vx + dx / norm * t, vy + dy / norm * t
        if left + 2 < x < right - 2 and top + 2 < y < bottom - 2:
            return x, y
    raise Stuck("no room for the bisector inside the drawing")


CENTRES = """(() => {
  const c = (e) => { const r = e.getBoundingClientRect(); return [r.left + r.width / 2, r.top + r.height / 2]; };
  const s = $('#svg-grid').getBoundingClientRect();
  return {v: c($('.init-blue')), a: c($$('.init-black')[0]), b: c($$('.init-black')[1]),
          box: [s.left, s.top, s.right, s.bottom]};
})()"""


@solves("bisect-angle")
async def bisect_angle(p: Play) -> None:
    x, y = _inside(await p.read(CENTRES))
    await p.click_at(x, y, "a point on the bisector")
    await p.click("$('#subbtn')")


@solves("circle-center")
async def circle_center(p: Play) -> None:
    await p.click("$('.black-circle')")  # the centre of its box
    await p.click("$('#subbtn')")


@solves("click-shades")
async def click_shades(p: Play) -> None:
    colour = await p.read("goal.match(/shades of (\\w+)/)[1]")
    for i in await p.read(
        "$$('#area span').map((s, i) => s.dataset.color === arg ? i : -1).filter((i) => i >= 0)", colour
    ):
        await p.click("$$('#area span')[arg]", i)
    await p.click("$('#submit')")
