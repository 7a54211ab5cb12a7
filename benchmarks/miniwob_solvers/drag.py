"""Drags: boxes, shapes, sortable lists, lines and a circle drawn with the mouse."""

from __future__ import annotations

from .play import Play, Stuck
from .registry import solves

#: A drag's direction as a move in CSS pixels.
MOVES = {"left": (-30.0, 0.0), "right": (30.0, 0.0), "up": (0.0, -30.0), "down": (0.0, 30.0)}


async def direction(p: Play) -> tuple[float, float]:
    word = await p.read("goal.match(/(left|right|up|down)/)[1]")
    return MOVES[str(word)]


@solves("drag-box")
async def drag_box(p: Play) -> None:
    await p.drag("$('#draggableSmall')", "$('#draggableLarge')")
    await p.click("$('#subbtn')")


@solves("drag-circle")
async def drag_circle(p: Play) -> None:
    await p.drag("$('svg circle')", "$('svg circle')", by=await direction(p))
    await p.click("$('#subbtn')")


@solves("drag-single-shape")
async def drag_single_shape(p: Play) -> None:
    await p.drag("$('.black-shape')", "$('.black-shape')", by=await direction(p))
    await p.click("$('#subbtn')")


ITEMS = "$$('#sortable li')"
#: Where an item goes: (its index now, the index it must reach), 0-based.
ITEM_MOVE = r"""(() => {
  const names = $$('#sortable li').map(txt);
  const m = goal.match(/^Drag (.+?) (to the|up by|down by|left by|right by) (.+)\.$/);
  const from = names.indexOf(m[1]);
  const where = m[2] + ' ' + m[3], n = names.length;
  const ordinal = where.match(/to the (\d+)\w\w position/);
  const cells = {'top left': 0, 'top center': 1, 'top right': 2, 'center left': 3, 'center': 4,
                 'center right': 5, 'bottom left': 6, 'bottom center': 7, 'bottom right': 8};
  const cell = where.match(/^to the (.+)$/);
  let to;
  if (ordinal) to = +ordinal[1] - 1;
  else if (where === 'to the top') to = 0;
  else if (where === 'to the bottom') to = n - 1;
  else if (where.startsWith('up by')) to = from - (n === 9 ? 3 : 1);
  else if (where.startsWith('down by')) to = from + (n === 9 ? 3 : 1);
  else if (where.startsWith('left by')) to = from - 1;
  else if (where.startsWith('right by')) to = from + 1;
  else to = cells[cell[1]];
  return [from, to];
})()"""


BOX = f"(() => {{ const r = {ITEMS}[arg].getBoundingClientRect(); return [r.left, r.top, r.width, r.height]; }})()"


def sign(v: float) -> int:
    return (v > 0) - (v < 0)


async def move_item(p: Play, i: int, j: int, *, grid: bool = False) -> None:
    """Drag sortable item ``i`` to index ``j``. jQuery UI's sortable moves the item beside the one
    under the pointer: after it when the pointer last moved right or down, else before it, and (a
    grid) only from the half of that item the pointer moves toward; every item passed on the way
    makes room at once. So the release point is on the half that puts it beside the right item, and
    the straight path enters the target's row at that very item."""
    x0, y0, w0, h0 = await p.read(BOX, i)
    start = (x0 + w0 / 2, y0 + h0 / 2)
    if not grid:
        x, y, w, h = await p.read(BOX, j)
        await p.drag_points(start, (x + w / 2, y + h / 2 + sign(j - i) * h * 0.3), "the item")
        return
    (ri, ci), (rj, cj) = divmod(i, 3), divmod(j, 3)
    if j > i and cj < ci:  # down and left: after the item at j, on its left half, entering at its top
        x, y, w, h = await p.read(BOX, j)
        to = (x + w * 0.15, y + h * 0.15)
    elif j < i and cj > ci:  # up and right: after the item before j, on its right half, entering at its bottom
        x, y, w, h = await p.read(BOX, j - 1)
        to = (x + w * 0.85, y + h * 0.85)
    else:
        x, y, w, h = await p.read(BOX, j)
        to = (x + w / 2 + sign(cj - ci) * w * 0.3, y + h / 2 + sign(rj - ri) * h * 0.3)
    await p.drag_points(start, to, "the item")


@solves("drag-items")
async def drag_items(p: Play) -> None:
    i, j = await p.read(ITEM_MOVE)
    await move_item(p, i, j)


@solves("drag-items-grid")
async def drag_items_grid(p: Play) -> None:
    i, j = await p.read(ITEM_MOVE)
    await move_item(p, i, j, grid=True)


@solves("drag-sort-numbers")
async def drag_sort_numbers(p: Play) -> None:
    for _ in range(8):
        values = [int(v) for v in await p.read(f"{ITEMS}.map(txt)")]
        target = sorted(values)
        if values == target:
            break
        # The first place that is wrong gets the number that belongs there.
        j = next(k for k, (a, b) in enumerate(zip(values, target, strict=True)) if a != b)
        i = values.index(target[j], j)
        await move_item(p, i, j)
    await p.click("$('#subbtn')")


SHAPE_TAGS = {"rectangles": "rect", "circles": "circle", "triangles": "polygon"}
#: The shapes of the drawing (not the boxes): their index, tag and fill.
SHAPES = "$$('#area_svg rect:not(#shape-container), #area_svg circle, #area_svg polygon')"


@solves("drag-shapes")
async def drag_shapes(p: Play) -> None:
    kind = SHAPE_TAGS[str(await p.read("goal.match(/Drag all (\\w+)/)[1]"))]
    tags = await p.read(f"{SHAPES}.map((e) => e.tagName)")
    for i, tag in enumerate(tags):
        if tag == kind:
            await p.drag(f"{SHAPES}[arg]", "$('#shape-container')", i)
    await p.click("$('#subbtn')")


@solves("drag-shapes-2")
async def drag_shapes_2(p: Play) -> None:
    goal = str(await p.read("goal"))
    shapes = await p.read(f"{SHAPES}.map((e) => [e.tagName, e.getAttribute('fill')])")
    word = goal.split("Drag all ", 1)[1].split(" ", 1)[0]
    for i, (tag, fill) in enumerate(shapes):
        left = tag == SHAPE_TAGS[word] if word in SHAPE_TAGS else fill == word
        await p.drag(f"{SHAPES}[arg]", f"$$('#shape-container')[{0 if left else 1}]", i)
    await p.click("$('#subbtn')")


DOT = """(() => {
  const c = $('#circ').getBoundingClientRect(), s = $('svg').getBoundingClientRect();
  return [c.left + c.width / 2, c.top + c.height / 2, s.left, s.top, s.right, s.bottom];
})()"""


@solves("draw-line")
async def draw_line(p: Play) -> None:
    x, y, left, top, right, bottom = await p.read(DOT)
    if "horizontal" in str(await p.read("goal")):
        a, b = (max(left + 4, x - 40), y), (min(right - 4, x + 40), y)
    else:
        a, b = (x, max(top + 4, y - 40)), (x, min(bottom - 4, y + 40))
    await p.drag_points(a, b, "the dot")
    await p.click("$('#controls button')")


@solves("draw-circle")
async def draw_circle(p: Play) -> None:
    # A drag is straight: the chord between two points 25 px from the dot, a quarter turn apart,
    # keeps their distances to it within a few pixels (the page scores how round the path is).
    x, y, left, top, right, bottom = await p.read(DOT)
    for sx, sy in ((1, 1), (-1, 1), (1, -1), (-1, -1)):
        a, b = (x + 25 * sx, y), (x, y + 25 * sy)
        if left < a[0] < right and top < a[1] < bottom:
            await p.drag_points(a, b, "the marked point")
            await p.click("$('#controls button')")
            return
    raise Stuck("no room around the dot")
