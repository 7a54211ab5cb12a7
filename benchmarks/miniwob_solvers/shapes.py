"""Shapes, drawings and counting: what a picture shows, read from its SVG or canvas."""

from __future__ import annotations

import math

from .play import Play, Stuck
from .registry import solves

#: Every item of a shapes grid (``common/shapes.js``) as the page describes one: its size
#: (large/small), colour, type (letter, digit, shape) and text (the character, or the shape's name).
ITEMS = r"""$$('#area_svg > *').map((e) => {
  const tag = e.tagName.toLowerCase();
  let type = 'shape', text, size;
  if (tag === 'text') {
    text = txt(e); type = /\d/.test(text) ? 'digit' : 'letter';
    size = parseFloat(e.getAttribute('font-size')) > 15 ? 'large' : 'small';
  } else {
    text = {rect: 'rectangle', circle: 'circle', polygon: 'triangle'}[tag];
    size = e.getBBox().width > 15 ? 'large' : 'small';
  }
  return {size, color: e.getAttribute('fill'), type, text};
})"""


def matches(item: dict[str, str], words: list[str]) -> bool:
    """Whether a shape fits a description such as "large red circle", "blue item", "small letter"."""
    *qualities, kind = words
    for word in qualities:
        if word in ("large", "small") and item["size"] != word:
            return False
        if word not in ("large", "small") and item["color"] != word:
            return False
    return kind == "item" or kind in (item["text"], item["type"])


@solves("click-shape")
async def click_shape(p: Play) -> None:
    words = str(await p.read("goal.replace(/^Click on a /, '')")).split()
    items = await p.read(ITEMS)
    index = next((i for i, item in enumerate(items) if matches(item, words)), None)
    if index is None:
        raise Stuck(f"no shape is a {' '.join(words)}")
    await p.click("$$('#area_svg > *')[arg]", index)


@solves("count-shape")
async def count_shape(p: Play) -> None:
    description = str(await p.read("goal.match(/^How many (.*)s are there\\?$/)[1]"))
    items = await p.read(ITEMS)
    count = sum(matches(item, description.split()) for item in items)
    await p.click("byText('#count-buttons button', arg)", str(count))


@solves("identify-shape")
async def identify_shape(p: Play) -> None:
    (item,) = await p.read(ITEMS)
    kind = item["text"] if item["type"] == "shape" else item["type"]
    await p.click("$$('#area-buttons button').find((b) => b.dataset.type === arg)", kind)


#: The polygon on the canvas: for each of 360 directions from its centre, how far the first dark
#: pixel lies (the page draws a regular polygon of radius 35 around the canvas's centre).
RAYS = r"""(() => {
  const c = $('#c'), ctx = c.getContext('2d');
  const data = ctx.getImageData(0, 0, c.width, c.height).data;
  const out = [];
  for (let a = 0; a < 360; a++) {
    const t = a * Math.PI / 180;
    let d = 0;
    for (let r = 8; r < 48; r += 0.5) {
      const x = Math.round(75 + r * Math.cos(t)), y = Math.round(50 + r * Math.sin(t));
      if (x < 0 || y < 0 || x >= c.width || y >= c.height) break;
      if (data[(y * c.width + x) * 4 + 3] > 128) { d = r; break; }
    }
    out.push(d);
  }
  return out;
})()"""


def corners(rays: list[float]) -> int:
    """The corners of a regular polygon seen from its centre: the peaks of the distance to its edge."""
    n = len(rays)
    smooth = [sum(rays[(i + k) % n] for k in (-2, -1, 0, 1, 2)) / 5 for i in range(n)]
    low, high = min(smooth), max(smooth)
    cut = (low + high) / 2
    runs, inside = 0, smooth[-1] > cut
    for value in smooth:
        if value > cut and not inside:
            runs += 1
        inside = value > cut
    return runs if runs else 0


@solves("count-sides")
async def count_sides(p: Play) -> None:
    sides = corners(await p.read(RAYS))
    if not 3 <= sides <= 7:
        raise Stuck(f"counted {sides} sides")
    await p.click("$$('#form button').find((b) => b.dataset.sides === arg)", str(sides))


@solves("grid-coordinate")
async def grid_coordinate(p: Play) -> None:
    await p.click("document.getElementById(bold[0])")


CIRCLES = """$$('svg circle').map((c) => {
  const r = c.getBoundingClientRect();
  return [r.left + r.width / 2, r.top + r.height / 2];
})"""


@solves("find-midpoint")
async def find_midpoint(p: Play) -> None:
    (ax, ay), (bx, by) = await p.read(CIRCLES)
    await p.click_at((ax + bx) / 2, (ay + by) / 2, "the midpoint")
    await p.click("$('#subbtn')")


@solves("right-angle")
async def right_angle(p: Play) -> None:
    points = await p.read(
        "(() => { const c = (e) => { const r = e.getBoundingClientRect(); return [r.left + r.width / 2,"
        " r.top + r.height / 2]; }; const s = $('#svg-grid').getBoundingClientRect();"
        " return [c($('#init-black')), c($('#init-blue')), [s.left, s.top, s.right, s.bottom]]; })()"
    )
    (ax, ay), (vx, vy), (left, top, right, bottom) = points
    length = math.hypot(ax - vx, ay - vy)
    ux, uy = -(ay - vy) / length, (ax - vx) / length  # perpendicular to VA at V
    for t in (40, -40, 25, -25, 12, -12):
        x, y = vx + ux * t, vy + uy * t
        if left + 3 < x < right - 3 and top + 3 < y < bottom - 3:
            await p.click_at(x, y, "a point square to the line")
            await p.click("$('#subbtn')")
            return
    raise Stuck("no room for the right angle")


@solves("visual-addition")
async def visual_addition(p: Play) -> None:
    total = await p.read("$$('#visual-1 .addition-block').length + $$('#visual-2 .addition-block').length")
    await p.write("$('#math-answer')", str(total))
    await p.click("$('#subbtn')")
