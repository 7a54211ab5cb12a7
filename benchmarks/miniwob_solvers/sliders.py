"""Pointer work beyond a click: sliders and a resize handle dragged, text selected by dragging or a
double click, a rich-text editor's toolbar, a cube turned by dragging."""

from __future__ import annotations

from .play import Play, Stuck
from .registry import solves

#: A jQuery UI slider's geometry and state: its box, orientation, range and value.
SLIDER = """(() => {
  const s = jQuery(arg), r = s[0].getBoundingClientRect();
  return {left: r.left, top: r.top, width: r.width, height: r.height,
          vertical: s.slider('option', 'orientation') === 'vertical',
          min: s.slider('option', 'min'), max: s.slider('option', 'max'), value: s.slider('value')};
})()"""


async def set_slider(p: Play, selector: str, want: int) -> None:
    """Drag the handle of the slider ``selector`` to ``want``, then step it with the arrow keys."""
    s = await p.read(SLIDER, selector)
    share = (want - s["min"]) / (s["max"] - s["min"])
    if s["vertical"]:
        to = (s["left"] + s["width"] / 2, s["top"] + s["height"] * (1 - share))
    else:
        to = (s["left"] + s["width"] * share, s["top"] + s["height"] / 2)
    handle = f"document.querySelector('{selector} .ui-slider-handle')"
    (x, y), _ = await p.place(handle)
    await p.drag_points((x, y), to, "the slider's handle")
    for _ in range(12):  # the handle has the focus: the arrow keys move it one step
        value = int((await p.read(SLIDER, selector))["value"])
        if value == want:
            return
        up = "ArrowUp" if s["vertical"] else "ArrowRight"
        down = "ArrowDown" if s["vertical"] else "ArrowLeft"
        await p.press(up if value < want else down)
    raise Stuck(f"the slider stayed away from {want}")


@solves("use-slider")
async def use_slider(p: Play) -> None:
    await set_slider(p, "#slider", int(await p.read("goal.match(/Select (-?\\d+) with/)[1]")))
    await p.click("$('#subbtn')")


@solves("use-slider-2")
async def use_slider_2(p: Play) -> None:
    for i, want in enumerate(await p.read("JSON.parse(goal.match(/(\\[.*\\])/)[1])"), start=1):
        await set_slider(p, f"#slider-{i}", int(want))
    await p.click("$('#subbtn')")


@solves("form-sequence")
async def form_sequence(p: Play) -> None:
    want, box = await p.read(
        "(() => { const m = goal.match(/Select (-?\\d+) with the slider, click the (\\d)/); return [+m[1], +m[2]]; })()"
    )
    await set_slider(p, "#slider", want)
    await p.click("$('#checkbox-' + arg)", box)
    await p.click("$('#subbtn')")


@solves("resize-textarea")
async def resize_textarea(p: Play) -> None:
    dimension, direction = await p.read("[bold[0], bold[1]]")
    handle = "$('.ui-resizable-e')" if dimension == "width" else "$('.ui-resizable-s')"
    step = 20.0 if direction == "larger" else -20.0
    await p.drag(handle, handle, by=(step, 0.0) if dimension == "width" else (0.0, step))
    await p.click("$('#submit')")


#: The first and the last character of an element's text, as boxes: a drag from before the one to
#: after the other selects it all.
TEXT_ENDS = """(() => {
  const e = arg === null ? $('#randomText') : $$('#randomText p')[arg];
  const walker = document.createTreeWalker(e, NodeFilter.SHOW_TEXT);
  const nodes = [];
  while (walker.nextNode()) if (walker.currentNode.data.trim()) nodes.push(walker.currentNode);
  const box = (node, i) => { const r = document.createRange(); r.setStart(node, i); r.setEnd(node, i + 1);
    const b = r.getBoundingClientRect(); return [b.left, b.top, b.right, b.bottom]; };
  const first = nodes[0], last = nodes[nodes.length - 1];
  const start = first.data.search(/\\S/), end = last.data.trimEnd().length - 1;
  return [box(first, start), box(last, end)];
})()"""


async def select_text(p: Play, which: int | None) -> None:
    (l1, t1, _, b1), (_, t2, r2, b2) = await p.read(TEXT_ENDS, which)
    await p.drag_points((l1 + 0.5, (t1 + b1) / 2), (r2 + 1, (t2 + b2) / 2), "the paragraph's text")


@solves("highlight-text")
async def highlight_text(p: Play) -> None:
    await select_text(p, None)
    await p.click("$('#subbtn')")


@solves("highlight-text-2")
async def highlight_text_2(p: Play) -> None:
    await select_text(p, int(await p.read("parseInt(goal.match(/the (\\d)\\w\\w paragraph/)[1])")) - 1)
    await p.click("$('#subbtn')")
