"""Tasks on the page's clock: things that move or blink, a price that changes, a hidden spot found by
the pointer's feedback. The player waits and reads the page again, as a person watches it."""

from __future__ import annotations

import asyncio
import time

from .play import Play, Stuck
from .registry import solves


@solves("chase-circle")
async def chase_circle(p: Play) -> None:
    # The pointer rests on the circle, and follows it as it moves, until the page ends the episode.
    for _ in range(400):
        await p.hover("$('#circ')")


#: The circles on screen now (they slide in from the sides), nearest to the middle first.
MOVING = """$$('#area_svg circle.item').map((c, i) => {
  const r = c.getBoundingClientRect(), s = $('#area_svg').getBoundingClientRect();
  return [i, r.left + r.width / 2, r.top + r.height / 2, s.left + 10, s.right - 10, s.top + 10, s.bottom - 10];
}).filter(([i, x, y, l, rt, t, b]) => x > l && x < rt && y > t && y < b)
  .sort((a, b) => Math.abs(a[1] - 80) - Math.abs(b[1] - 80))"""


@solves("moving-items")
async def moving_items(p: Play) -> None:
    # Every circle clicked scores; the page ends the episode by itself after 9.9 s.
    for _ in range(600):
        visible = await p.read(MOVING)
        if not visible:  # none on screen: wait a moment (the page's end comes after a step too)
            await p.wait(0.05)
            continue
        _, x, y, *_ = visible[0]
        await p.click_at(x, y, "the moving circle")


@solves("simon-says")
async def simon_says(p: Play) -> None:
    # Watch the buttons light up, one after the other, then push them in that order.
    lit = "($$('#area button').find((b) => b.classList.contains('push')) || {}).dataset"
    sequence: list[str] = []
    was: str | None = None
    last = time.monotonic()
    while time.monotonic() - last < 1.2 or not sequence:
        now = await p.read(f"({lit} || {{}}).button || null")
        if now is not None and now != was:
            sequence.append(str(now))
            last = time.monotonic()
        was = now
        if not sequence and time.monotonic() - last > 5:
            raise Stuck("no button lit")
        await asyncio.sleep(0.02)
    for button in sequence:
        await p.click("$('#button-' + arg)", button)


@solves("stock-market")
async def stock_market(p: Play) -> None:
    limit = float(str(await p.read("goal.match(/less than \\$(\\d+\\.\\d+)/)[1]")))
    price = "parseFloat(txt($('#stock-price')).slice(1))"
    await p.until(f"{price} <= {limit}", timeout_s=15, every_s=0.01)
    await p.click("$('#buy')")


SIGNALS = {"HOT": 0, "WARM": 1, "COLD": 2, "ICE COLD": 3}


@solves("hot-cold")
async def hot_cold(p: Play) -> None:
    # The pointer's feedback ranks a spot (ICE COLD over 40 px away, COLD, WARM, HOT under 5 px):
    # search a grid, then finer grids around the warmest spot, and click where it is hot.
    box = await p.read(
        "(() => { const r = $('#touch-area').getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; })()"
    )
    left, top, right, bottom = box
    best: tuple[int, float, float] = (9, (left + right) / 2, (top + bottom) / 2)
    spacing = 36.0
    centre = best[1:]
    while True:
        xs = [centre[0] + spacing * k for k in range(-3, 4)]
        ys = [centre[1] + spacing * k for k in range(-3, 4)]
        points = [(x, y) for y in ys for x in xs if left + 1 < x < right - 1 and top + 1 < y < bottom - 1]
        for x, y in points:
            await p.hover_at(x, y)
            signal = SIGNALS.get(str(await p.read("txt($('#signal'))")), 9)
            if signal < best[0]:
                best = (signal, x, y)
            if signal == 0:
                break
        if best[0] == 0 or spacing < 2:
            break
        centre, spacing = best[1:], spacing / 3
    if best[0] > 2:
        raise Stuck("no warm spot found")
    await p.click_at(best[1], best[2], "the hot spot")
