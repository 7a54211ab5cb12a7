"""Small applications: a search engine, a phone book, a menu to order from, a terminal, number games,
an agreement to scroll through."""

from __future__ import annotations

from .play import Play, Stuck
from .registry import solves


@solves("search-engine")
async def search_engine(p: Play) -> None:
    term, position = await p.read("[quoted[0], parseInt(bold[1])]")
    await p.write("$('#search-text')", term)
    await p.click("$('#search')")
    page, row = divmod(position - 1, 3)
    if page:
        await p.click("byText('#pagination a', arg)", str(page + 1))
    await p.click("$$('#page-content a')[arg]", row)


@solves("phone-book")
async def phone_book(p: Play) -> None:
    name, what = await p.read("goal.match(/^Find (.+) in the contact book and click on their (\\w+)/).slice(1)")
    for _ in range(6):
        if await p.read("txt($('#contact .name')) === arg", name):
            await p.click("$('#contact a.' + arg)", what)
            return
        await p.click("byText('#pagination a', '>')")
    raise Stuck(f"no contact named {name}")


@solves("order-food")
async def order_food(p: Play) -> None:
    goal = str(await p.read("goal"))
    item = "$$('.food-item').find((f) => txt(f.querySelector('.item-name')) === arg)"
    if goal.startswith("Order one of each item: "):
        for name in goal.removeprefix("Order one of each item: ").split(", "):
            await p.click(f"({item}).querySelector('.add')", name.strip())
    else:
        count, kind = await p.read("goal.match(/^Order (\\d+) items that are (.+)$/).slice(1)")
        name = await p.read(
            "txt($$('.food-item').find((f) => $$('img', f).some((i) => i.alt === arg)).querySelector('.item-name'))",
            kind,
        )
        for _ in range(int(count)):
            await p.click(f"({item}).querySelector('.add')", name)
    await p.click("$('#submit-order button')")


@solves("terminal")
async def terminal(p: Play) -> None:
    await p.write("$('#terminal')", "ls", enter=True)
    files = str(await p.read("txt($$('#terminal .output').pop())")).split()
    wanted = await p.read("goal.includes('no file extension') ? '' : bold[0]")
    name = next((f for f in files if (f.endswith(wanted) if wanted else "." not in f)), None)
    if name is None:
        raise Stuck(f"no file for {wanted!r} in {files}")
    await p.write("$('#terminal')", f"rm {name}", enter=True)


@solves("guess-number")
async def guess_number(p: Play) -> None:
    low, high = 0, 9
    while low <= high:
        guess = (low + high) // 2
        await p.write("$('#tt')", str(guess))
        await p.click("$('#subbtn')")
        if await p.read("!$('#higher').classList.contains('hide')"):
            low = guess + 1
        elif await p.read("!$('#lower').classList.contains('hide')"):
            high = guess - 1
    raise Stuck("the number was not found")


def fits(goal: str, n: int) -> bool:
    words = goal.split()
    if "less" in words:
        return n < int(words[words.index("than") + 1].rstrip(","))
    if "greater" in words:
        return n > int(words[words.index("than") + 1].rstrip(","))
    return (n % 2 == 1) == ("odd" in words)


@solves("generate-number")
async def generate_number(p: Play) -> None:
    goal = str(await p.read("goal"))
    for _ in range(40):
        await p.click("$('#generate')")
        if fits(goal, int(await p.read("txt($('#display-number'))"))):
            await p.click("$('#submit')")
            return
    raise Stuck("no number fit")


@solves("odd-or-even")
async def odd_or_even(p: Play) -> None:
    numbers = await p.read("$$('.display-number').map((d) => parseInt(txt(d)))")
    for i, n in enumerate(numbers):
        await p.click(f"$$('.row')[arg].querySelector('.{'odd' if n % 2 else 'even'}')", i)
    await p.click("$('#submit')")


@solves("find-greatest")
async def find_greatest(p: Play) -> None:
    values = await p.read("$$('.card .card-value').map((v) => parseInt(txt(v)))")
    await p.click("$$('.card')[arg]", values.index(max(values)))
    await p.click("$('#submit')")


@solves("number-checkboxes")
async def number_checkboxes(p: Play) -> None:
    pattern = await p.read("PATTERNS[parseInt(quoted[0])]")
    for row, cells in enumerate(pattern):
        for col, on in enumerate(cells):
            if on:
                await p.click("$$('#checkboxes input')[arg]", row * 4 + col)
    await p.click("$('#subbtn')")


async def scroll_to_end(p: Play, panel: str, direction: str) -> None:
    """Turn the wheel over ``panel`` until it is at its end in ``direction``."""
    at_end = (
        f"(() => {{ const t = {panel}; return t.scrollTop + t.clientHeight >= t.scrollHeight - 1; }})()"
        if direction == "down"
        else f"{panel}.scrollTop <= 0"
    )
    for _ in range(40):
        if await p.read(at_end):
            return
        await p.scroll(direction, panel)
    raise Stuck(f"the panel did not reach its end ({direction})")


@solves("scroll-text")
async def scroll_text(p: Play) -> None:
    await scroll_to_end(p, "$('#text-area')", "down")
    word = await p.read("$('#text-area').value.trim().split(/\\s+/).pop().replace(/[^a-zA-Z0-9]/g, '')")
    await p.write("$('#answer-input')", str(word))
    await p.click("$('#subbtn')")


@solves("scroll-text-2")
async def scroll_text_2(p: Play) -> None:
    direction = "down" if await p.read("goal.includes('bottom')") else "up"
    await scroll_to_end(p, "$('#text-area')", direction)
    await p.click("$('#subbtn')")


@solves("sign-agreement")
async def sign_agreement(p: Play) -> None:
    if await p.read("goal === 'Click the cancel button.'"):
        await p.click("$('#cancel')")
        return
    await scroll_to_end(p, "$('#text-area')", "down")
    await p.until("!$('#name').disabled")
    await p.write("$('#name')", str(await p.read("quoted[0]")))
    await p.click("$('#agree')" if await p.read("goal.endsWith('\"Agree\"')") else "$('#cancel')")
