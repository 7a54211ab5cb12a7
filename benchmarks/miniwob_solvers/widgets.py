"""Widgets that hide what to click: menus, tabs, a pie menu, a file tree, a scroll list, a dropdown."""

from __future__ import annotations

from .click import still
from .play import Play, Stuck
from .registry import solves


@solves("click-option")
async def click_option(p: Play) -> None:
    name = await p.read("goal.match(/^Select (.*) and click Submit\\.$/)[1]")
    await p.click("$$('#boxes label').find((l) => txt(l) === arg).querySelector('input')", name)
    await p.click("$('#subbtn')")


@solves("click-widget")
async def click_widget(p: Play) -> None:
    await p.click("$$('#area .widget').find((w) => w.querySelector('[data-type]').dataset.type === quoted[0])")


@solves("click-test", "click-test-2", "click-test-transfer")
async def click_test(p: Play) -> None:
    if await p.read("goal === 'Click the button.'"):
        await p.click("$('#subbtn')")
    else:
        await p.click("byText('#area button', goal.match(/Click button (\\w+)\\./)[1])")


@solves("unicode-test")
async def unicode_test(p: Play) -> None:
    await p.click("byText('#area button', quoted[0])")


@solves("click-tab")
async def click_tab(p: Play) -> None:
    await p.click("byText('#area ul a', goal.match(/Click on (Tab #\\d)\\./)[1])")


LINK = "$$('#area .alink').find((a) => txt(a) === quoted[0] && a.offsetParent !== null)"
#: The tab that holds the wanted link (its anchor), or null when the link shows already.
TAB_OF_LINK = f"""(() => {{
  if ({LINK}) return null;
  const a = $$('#area .alink').find((a) => txt(a) === quoted[0]);
  if (!a) return null;
  const panel = a.closest('[id^=tabs-]');
  return $$('#area ul a').find((t) => t.getAttribute('href') === '#' + panel.id);
}})()"""


@solves("click-tab-2", "click-tab-2-easy", "click-tab-2-medium", "click-tab-2-hard")
async def click_tab_2(p: Play) -> None:
    if await p.read("!$$('#area .alink').some((a) => txt(a) === quoted[0])"):
        # The hard variant may empty the tab that held it: then that tab is the answer.
        await p.click("$$('#area ul a')[1]")
        return
    if await p.read(f"!!{TAB_OF_LINK}"):
        await p.click(TAB_OF_LINK)
        await still(p)
    await p.click(LINK)


@solves("click-menu")
async def click_menu(p: Play) -> None:
    path = str(await p.read("goal.replace(/^Select /, '')")).split(">")
    item = "$$('#menu li').find((li) => txt(li.querySelector(':scope > div')) === arg)"
    for name in path[:-1]:  # a submenu opens while the pointer rests on its item
        await p.hover(item, name)
        await p.until(
            f"(() => {{ const ul = ({item}).querySelector('ul'); return ul && ul.offsetParent !== null && "
            "ul.getAttribute('aria-hidden') !== 'true'; })()",
            name,
        )
        await still(p)
    await p.click(item, path[-1])


MENU_2_ICONS = {
    "ui-icon-disk": "Save", "ui-icon-seek-start": "Prev", "ui-icon-stop": "Stop", "ui-icon-play": "Play",
    "ui-icon-seek-end": "Next", "ui-icon-zoomin": "Zoom In", "ui-icon-zoomout": "Zoom Out",
}  # fmt: skip


@solves("click-menu-2")
async def click_menu_2(p: Play) -> None:
    label = await p.read("quoted[1] || null")
    if label is None:
        icon = await p.read("[...$('#query .ui-icon').classList].find((c) => c !== 'ui-icon')")
        label = MENU_2_ICONS[str(icon)]
    await p.click("$('#open-menu')")
    item = "$$('#menu li').find((li) => txt(li.querySelector(':scope > div')) === arg)"
    if label in ("Prev", "Stop", "Play", "Next"):
        await p.hover(item, "Playback")
        await p.until(f"({item}).querySelector('ul').offsetParent !== null", "Playback")
        await still(p)
    await p.click(item, label)


@solves("click-pie", "click-pie-nodelay")
async def click_pie(p: Play) -> None:
    await p.click("document.getElementById('wheelnav-divWheel-spreadertitle')")
    # The slices fly out (for a second, in the variant that animates): wait until they stand still.
    title = "$$('#divWheel text[id^=wheelnav-divWheel-title-]').find((t) => txt(t) === bold[0])"
    await p.wait(1.0)
    last = None
    for _ in range(30):
        spot = await p.spot(title)
        if last is not None and abs(spot["x"] - last[0]) < 0.5 and abs(spot["y"] - last[1]) < 0.5:
            break
        last = (spot["x"], spot["y"])
        await p.wait(0.2)
    # A hovered item is re-rendered (its nodes brought to the front): a click that did nothing is
    # tried again elsewhere on the item, the pointer coming from outside it, as a person clicks again.
    (x, y), _ = await p.place(title)
    centre = await p.spot("document.getElementById('wheelnav-divWheel-spreader')")
    for share in (0.9, 0.6, 1.0):
        await p.click_at(centre["x"] + (x - centre["x"]) * share, centre["y"] + (y - centre["y"]) * share, "the item")
        await p.hover("$('#query')")
    raise Stuck("the pie's item took no click")


@solves("navigate-tree")
async def navigate_tree(p: Play) -> None:
    target = "$$('#tree span').find((s) => txt(s) === quoted[0])"
    # The closed folders on the way, outermost first.
    folders = await p.read(f"""(() => {{
      const out = [];
      for (let li = ({target}).parentElement.parentElement.closest('li'); li; li = li.parentElement.closest('li'))
        out.unshift(txt(li.querySelector(':scope > span')));
      return out;
    }})()""")
    for depth in range(len(folders)):
        folder = f"""(() => {{
          let li = ({target}).parentElement;
          for (let i = 0; i < {len(folders) - depth}; i++) li = li.parentElement.closest('li');
          return li.querySelector(':scope > span');
        }})()"""
        if await p.read(f"({folder}).nextElementSibling.offsetParent === null"):
            await p.click(folder)
            await still(p)
    await p.click(target)


@solves("click-scroll-list")
async def click_scroll_list(p: Play) -> None:
    names = str(await p.read("goal.match(/^Select (.*) from the scroll list and click Submit\\.$/)[1]")).split(", ")
    option = "[...$('#options').options].find((o) => txt(o) === arg)"
    for i, name in enumerate(names):
        await p.click(option, name, modifiers=["ctrl"] if i else None)
    if await p.read("$('#options').selectedOptions.length") != len(names):
        raise Stuck("the list did not keep the selection")
    await p.click("byText('#area button', 'Submit')")


@solves("choose-list")
async def choose_list(p: Play) -> None:
    name = await p.read("goal.match(/^Select (.*) from the list and click Submit\\.$/)[1]")
    await p.select("$('#options')", str(name))
    await p.click("byText('#area button', 'Submit')")


@solves("form-sequence-3")
async def form_sequence_3(p: Play) -> None:
    choice = await p.read("goal.match(/^Choose (.*) from the dropdown/)[1]")
    await p.click("$('.selectric')")
    await p.click("$$('.selectric-items li').find((li) => txt(li) === arg)", choice)
    await p.click("byText('#buttons button', quoted[0])")
