"""Dates, times and bookings: a date picker, date and time fields, flights, tickets, a day's calendar."""

from __future__ import annotations

import re

from .click import still
from .play import Play, Stuck
from .registry import solves

MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December"]  # fmt: skip
PICKER = "$('#ui-datepicker-div')"


async def pick_date(p: Play, field: str, date: str) -> None:
    """Open jQuery UI's date picker from ``field`` and choose ``date`` (MM/DD/YYYY) in it."""
    month, day, year = (int(v) for v in date.split("/"))
    await p.click(field)
    await p.until(f"{PICKER} && {PICKER}.offsetParent !== null && {PICKER}.getBoundingClientRect().height > 20")
    await still(p)
    for _ in range(36):
        shown_month, shown_year = await p.read("[txt($('.ui-datepicker-month')), +txt($('.ui-datepicker-year'))]")
        months = (year - shown_year) * 12 + month - (MONTHS.index(shown_month) + 1)
        if months == 0:
            break
        await p.click("$('.ui-datepicker-next')" if months > 0 else "$('.ui-datepicker-prev')")
    await p.click("$$('#ui-datepicker-div td[data-month] a').find((a) => txt(a) === arg)", str(day))


@solves("choose-date", "choose-date-easy", "choose-date-medium", "choose-date-nodelay")
async def choose_date(p: Play) -> None:
    await pick_date(p, "$('#datepicker')", str(await p.read("goal.match(/Select (\\S+) as the date/)[1]")))
    await p.click("$('#subbtn')")


@solves("enter-date")
async def enter_date(p: Play) -> None:
    month, day, year = str(await p.read("bold[0]")).split("/")
    # Typed from the month's segment (the field's left end), as a person types a date.
    await p.write("$('#tt')", f"{month}{day}{year}", at=(0.12, 0.5))
    await p.click("$('#subbtn')")


@solves("enter-time")
async def enter_time(p: Play) -> None:
    found = re.search(r"Enter (\d+):(\d+) (AM|PM) as the time", str(await p.read("goal")))
    if found is None:
        raise Stuck("unread time")
    hour, minute, half = found.groups()
    await p.write("$('#tt')", f"{int(hour):02d}{minute}{half[0]}", at=(0.12, 0.5))
    await p.click("$('#subbtn')")


async def autocomplete(p: Play, field: str, text: str) -> None:
    """Type ``text`` into ``field`` and choose the first suggestion that contains it."""
    await p.write(field, text)
    item = "$$('.ui-autocomplete li').find((li) => li.offsetParent !== null && txt(li).includes(arg))"
    await p.until(f"!!({item})", text)
    await p.click(item, text)


@solves("book-flight", "book-flight-nodelay")
async def book_flight(p: Play) -> None:
    kind, origin, destination, date = await p.read("bold")
    await autocomplete(p, "$('#flight-from')", origin)
    await autocomplete(p, "$('#flight-to')", destination)
    await pick_date(p, "$('#datepicker')", date)
    await p.click("$('#search')")
    key = "price" if kind == "cheapest" else "duration"
    best = f"""$$('#results .flight').reduce((a, f) => {{
      const v = (e) => +(e.querySelector('[data-{key}]').getAttribute('data-{key}'));
      return a === null || v(f) < v(a) ? f : a;
    }}, null).querySelector('.flight-price')"""
    await p.click(best)


@solves("buy-ticket")
async def buy_ticket(p: Play) -> None:
    kind = str(await p.read("bold[0]"))
    key = "price" if "cost" in kind else "duration"
    pick = "<" if kind in ("cheapest cost", "shortest duration") else ">"
    best = f"""$$('#area .flight').reduce((a, f) => {{
      const v = (e) => +(e.querySelector('[data-{key}]').getAttribute('data-{key}'));
      return a === null || v(f) {pick} v(a) ? f : a;
    }}, null).querySelector('.buy-ticket')"""
    await p.click(best)


#: The starts (half hours) where a new event of ``arg[0]`` half hours fits between the half hours
#: ``arg[1]`` and ``arg[2]``: no other event covers its cells.
FREE_STARTS = """(() => {
  const [n, first, last] = arg;
  const events = $$('#area .event').map((e) => e.getBoundingClientRect());
  const free = (i) => {
    const c = $('#hh-' + i).getBoundingClientRect();
    return !events.some((e) => e.top < c.bottom - 1 && e.bottom > c.top + 1);
  };
  const out = [];
  for (let s = first; s + n <= last; s++) {
    let ok = true;
    for (let i = s; i < s + n; i++) ok = ok && free(i);
    if (ok) out.push(s);
  }
  return out;
})()"""
WINDOWS = {"8AM and 12PM": 16, "12PM and 4PM": 24, "4PM and 8PM": 32}
LENGTHS = {"0.5 hours": 1, "30 mins": 1, "1 hour": 2, "60 mins": 2, "1.5 hours": 3, "90 mins": 3}


@solves("daily-calendar")
async def daily_calendar(p: Play) -> None:
    goal = str(await p.read("goal"))
    found = re.match(r'Create a (.+?) event named "(.+?)", between (.+)\.$', goal)
    if found is None:
        raise Stuck(f"unread goal {goal!r}")
    length, name, window = LENGTHS[found[1]], found[2], WINDOWS[found[3]]
    # The event must end inside the window: it starts at most `length` half hours before it.
    starts = await p.read(FREE_STARTS, [length, window - length, window + 8])
    if not starts:
        raise Stuck("no free time in the window")
    for _ in range(12):  # a start whose first and last half hours both show in the calendar's panel
        for start in starts:
            a = await p.spot(f"$('#hh-{start}')", at=(0.5, 0.2))
            b = await p.spot(f"$('#hh-{start + length - 1}')", at=(0.5, 0.8))
            if a.get("hits") and b.get("hits"):
                await p.drag_points((a["x"], a["y"]), (b["x"], b["y"]), "the event's first half hour")
                break
        else:
            first = await p.spot(f"$('#hh-{starts[0]}')")
            await p.scroll("up" if first.get("above") else "down", "$('#area')")
            continue
        break
    else:
        raise Stuck("the window never showed")
    await p.write("$('#event-name')", name)
    await p.click("$('#create-event .create')")
