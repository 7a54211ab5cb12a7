"""A rich-text editor styled through its toolbar, and a cube turned by dragging."""

from __future__ import annotations

import asyncio
import re

from .play import Play, Stuck
from .registry import solves

#: The box of the characters [arg[0], arg[1]) of the editor's paragraph text.
CHARS = """(() => {
  const node = $('#editor .ql-editor p').firstChild, r = document.createRange();
  r.setStart(node, arg[0]); r.setEnd(node, arg[1]);
  const b = r.getBoundingClientRect();
  return [b.left, b.top, b.right, b.bottom];
})()"""
TOOLS = {"bold": ".ql-bold", "italics": ".ql-italic", "underlined": ".ql-underline"}


async def select_word(p: Play, text: str, word: str) -> None:
    """Select ``word`` of the editor's text: a double click selects its letters, and Shift+ArrowRight
    adds each punctuation mark after them (the page wants the word as its query spells it)."""
    start = 0
    for token in text.split(" "):
        if token == word:
            break
        start += len(token) + 1
    else:
        raise Stuck(f"no word {word!r} in the editor")
    letters = len(word.rstrip(".,;:!?"))
    left, top, right, bottom = await p.read(CHARS, [start, start + letters])
    await p.dblclick({"x": (left + right) / 2, "y": (top + bottom) / 2})
    for _ in range(len(word) - letters):
        await p.press("Shift+ArrowRight")


@solves("text-editor")
async def text_editor(p: Play) -> None:
    goal = str(await p.read("goal"))
    word, style = await p.read("[bold[0], bold[1].trim()]")
    text = str(await p.read("txt($('#editor .ql-editor p'))"))
    if word == "everything":
        await p.click("$('#editor .ql-editor p')")
        await p.press("Control+A")
    else:
        await select_word(p, text, word)
    # The editor takes up a new selection on a timer (~50 ms later): a policy that answers in
    # milliseconds waits for it, as a model, far slower, would not need to.
    await p.wait(0.2)
    if "color" in goal:
        await p.click("$('.ql-color .ql-picker-label')")
        await p.click("$$('.ql-color .ql-picker-item').find((i) => i.dataset.value === COLOR_MAP[arg][0])", style)
    else:
        await p.click(f"$('.ql-toolbar {TOOLS[style]}')")
    await p.click("$('#subbtn')")


#: The cube's rotation as the page styles it: rotateX (the page's Y) and rotateY (its X), in degrees.
ROTATION = "$('.cube').style.transform"
#: Where each side faces the user: a rotation (the page's X, Y) inside that side's band.
FACING = {"6": (None, 88.0), "1": (None, 264.0), "5": (86.0, 0.0), "4": (177.0, 0.0), "3": (269.0, 0.0),
          "2": (358.0, 0.0)}  # fmt: skip


def turn(now: float, target: float) -> float:
    """The shortest turn from ``now`` to ``target`` degrees, in (-180, 180]."""
    d = (target - now) % 360
    return d - 360 if d > 180 else d


async def rotation(p: Play) -> tuple[float, float]:
    """The cube's rotation once it stands still."""
    last = None
    for _ in range(100):
        style = str(await p.read(ROTATION))
        if style == last:
            break
        last = style
        await asyncio.sleep(0.1)
    found = re.search(r"rotateX\((-?[\d.]+)deg\) rotateY\((-?[\d.]+)deg\)", last or "")
    if found is None:
        return 1122.0 % 360, 136.0  # not turned yet: the page's start
    return float(found[2]) % 360, float(found[1]) % 360


@solves("drag-cube")
async def drag_cube(p: Play) -> None:
    want = str(await p.read("bold[0]"))
    # A drag turns the cube by up to ~2.9 degrees per pixel (the page samples the pointer every
    # 20 ms and lets the cube spin on): drag toward the facing rotation, look, drag again.
    gain = 2.9
    centre = await p.spot("$('.cube')")
    x0, y0 = centre["x"], centre["y"]
    for _ in range(40):
        x, y = await rotation(p)  # still: the side facing the user is the one the page will read
        if await p.read("txt($('.cube-image.active'))") == want:
            break
        tx, ty = FACING[want]
        dy = turn(y, ty)
        if abs(dy) > 30 or tx is None:
            pixels = max(-60.0, min(60.0, -dy / gain))  # the cube turns against the pointer's vertical move
            await p.drag_points((x0, y0), (x0, y0 + pixels), "the cube")
            continue
        upside = 90 < y < 270
        dx = turn(x, tx)
        pixels = max(-60.0, min(60.0, (-dx if upside else dx) / gain))
        await p.drag_points((x0, y0), (x0 + pixels, y0), "the cube")
    else:
        raise Stuck(f"side {want} never faced the user")
    await p.click("$('#subbtn')")
