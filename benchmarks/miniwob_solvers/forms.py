"""Forms: typing into fields, copying and pasting, picking values, and the submit button."""

from __future__ import annotations

import re

from .play import Play, Stuck
from .registry import solves


@solves("enter-text", "enter-text-dynamic")
async def enter_text(p: Play) -> None:
    await p.write("$('#tt')", str(await p.read("quoted[0]")))
    await p.click("$('#subbtn')")


@solves("enter-text-2")
async def enter_text_2(p: Play) -> None:
    text, upper = await p.read("[quoted[0], goal.includes('upper case')]")
    await p.write("$('#tt')", text.upper() if upper else text.lower())
    await p.click("$('#subbtn')")


@solves("enter-password")
async def enter_password(p: Play) -> None:
    password = str(await p.read("quoted[0]"))
    await p.write("$('#password')", password)
    await p.write("$('#verify')", password)
    await p.click("$('#subbtn')")


@solves("login-user", "login-user-popup")
async def login_user(p: Play) -> None:
    user, password = await p.read("[quoted[0], quoted[1]]")
    for field, value in (("#username", user), ("#password", password)):
        for _ in range(2):
            await p.write(f"$('{field}')", value)
            if not await p.read("!!$('#popup')"):
                break
            # A popup took the focus and disabled the form: cancel it, then type again.
            await p.click("$('#popup-cancel')")
    await p.click("$('#subbtn')")


@solves("focus-text")
async def focus_text(p: Play) -> None:
    await p.click("$('#tt')")


@solves("focus-text-2")
async def focus_text_2(p: Play) -> None:
    await p.click("$$('#area input')[parseInt(goal.match(/the (\\d)\\w\\w input/)[1]) - 1]")


@solves("form-sequence-2")
async def form_sequence_2(p: Play) -> None:
    radio, number, box = await p.read(
        '(() => { const m = goal.match(/the (\\d)\\w\\w radio button and enter the number "(-?\\d+)" into the '
        "(\\d)\\w\\w textbox/); return [+m[1], m[2], +m[3]]; })()"
    )
    await p.click("$$('#area input[type=radio]')[arg]", radio - 1)
    await p.write("$('#input-' + arg)", number, box)
    await p.click("$('#subbtn')")


#: The field of a movie search whose label matches ``arg`` (a pattern), and the button that sends it.
MOVIE_FIELD = """$$('#area input[type=text]').find((i) => {
  let row = i.parentElement;
  while (!txt(row)) row = row.parentElement;
  return new RegExp(arg).test(txt(row));
})"""
MOVIE_SUBMIT = "$$('#area button, #area .final, #area .ui-submit').pop()"


@solves("multi-layouts", "multi-orderings")
async def multi_layouts(p: Play) -> None:
    genre, director, year = await p.read("$$('#query b').map(txt)")
    for label, value in (("Genre", genre), ("Director", director), ("Year|Released", year)):
        await p.write(MOVIE_FIELD, value, label)
    await p.click(MOVIE_SUBMIT)


@solves("read-table")
async def read_table(p: Play) -> None:
    value = await p.read("$$('#tab tr').map((r) => [...r.children].map(txt)).find((c) => c[0] === bold[0])[1]")
    await p.write("$('#tt')", str(value))
    await p.click("$('#subbtn')")


@solves("read-table-2")
async def read_table_2(p: Play) -> None:
    table = dict(await p.read("$$('#tab tr').map((r) => [...r.children].map(txt))"))
    for i in (1, 2):
        key = str(await p.read(f"$('#ll{i}').dataset.key"))
        await p.write(f"$('#tt{i}')", table[key])
    await p.click("$('#subbtn')")


async def copy_paste_from(p: Play, source: str) -> None:
    """Select all of ``source``'s text, copy it, paste it into the answer field, submit."""
    await p.click(source)
    await p.press("Control+A")
    await p.press("Control+C")
    await p.click("$('#answer-input')")
    await p.press("Control+V")
    await p.click("$('#subbtn')")


@solves("copy-paste", clipboard=True)
async def copy_paste(p: Play) -> None:
    await copy_paste_from(p, "$('#to-copy')")


@solves("copy-paste-2", clipboard=True)
async def copy_paste_2(p: Play) -> None:
    await copy_paste_from(p, "$('#text-' + parseInt(bold[0]))")


@solves("find-word")
async def find_word(p: Play) -> None:
    word = await p.read(
        "txt($('#area p')).split(/\\s+/)[parseInt(goal.match(/the (\\d+)\\w\\w word/)[1]) - 1].replace(/[^a-zA-Z]/g, '')"
    )
    await p.write("$('#answer-input')", str(word))
    await p.click("$('#subbtn')")


@solves("text-transform")
async def text_transform(p: Play) -> None:
    await p.write("$('#tt')", str(await p.read("$$('#captcha span').map(txt).join('')")))
    await p.click("$('#subbtn')")


@solves("simple-arithmetic")
async def simple_arithmetic(p: Play) -> None:
    a, op, b = str(await p.read("txt($('#math-problem'))")).rstrip("= ").split()
    value = {"+": int(a) + int(b), "-": int(a) - int(b), "x": int(a) * int(b)}[op]
    await p.write("$('#math-answer')", str(value))
    await p.click("$('#subbtn')")


@solves("simple-algebra")
async def simple_algebra(p: Play) -> None:
    problem = str(await p.read("txt($('#math-problem'))"))
    found = re.fullmatch(r"(x|\d+) ([-+]) (x|\d+) = (\d+)", problem)
    if found is None:
        raise Stuck(f"unread problem {problem!r}")
    left, op, right, total = found.groups()
    n = int(right if left == "x" else left)
    if op == "+":  # x + n = t, n + x = t
        x = int(total) - n
    elif left == "x":  # x - n = t
        x = int(total) + n
    else:  # n - x = t
        x = n - int(total)
    await p.write("$('#math-answer')", str(x))
    await p.click("$('#subbtn')")


@solves("use-autocomplete", "use-autocomplete-nodelay")
async def use_autocomplete(p: Play) -> None:
    start, end = await p.read("[bold[0], bold[1] || '']")
    await p.write("$('#tags')", start)
    item = "$$('.ui-autocomplete li').find((li) => txt(li).startsWith(arg[0]) && txt(li).endsWith(arg[1]))"
    await p.until(f"!!({item}) && ({item}).offsetParent !== null", [start, end])
    await p.click(item, [start, end])
    await p.click("$('#subbtn')")


async def close_picker(p: Play, colour: str) -> None:
    """Type the colour into the picker's field; a click beside it closes the picker (it covers the button)."""
    await p.write("$('#col')", colour)
    await p.click("$('#query')")
    await p.click("$('#subbtn')")


@solves("use-colorwheel")
async def use_colorwheel(p: Play) -> None:
    colour = await p.read("ui_utils.colorNameToHex(goal.match(/^Select (\\w+) with/)[1]).slice(1)")
    await close_picker(p, str(colour))


@solves("use-colorwheel-2")
async def use_colorwheel_2(p: Play) -> None:
    rgb = await p.read("getComputedStyle($('#query .cc')).backgroundColor.match(/\\d+/g).map(Number)")
    await close_picker(p, "".join(f"{v:02x}" for v in rgb))


@solves("use-spinner")
async def use_spinner(p: Play) -> None:
    want = int(await p.read("goal.match(/Select (-?\\d+) with/)[1]"))
    for _ in range(30):
        now = int(await p.read("parseInt($('#spinner').value)"))
        if now == want:
            break
        await p.click("$('.ui-spinner-up')" if now < want else "$('.ui-spinner-down')")
    await p.click("$('#subbtn')")
