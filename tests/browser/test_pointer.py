"""The pointer's other hands and the tabs on a real BrowserSession (the /hands/ pages of SiteServer):
what each sends the page and what it says it changed."""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator
from typing import Any

import pytest
from playwright.async_api import Browser

from webagent.browser.secretpage import SecretPage
from webagent.browser.session import BrowserSession
from webagent.config import BrowserConfig
from webagent.errors import ActionError
from webagent.guard.secrets import Secrets
from webagent.testing.sites import SiteServer

from ..procs import cmdline, descendants

pytestmark = pytest.mark.browser


@pytest.fixture(params=[True, False], ids=["direct-cdp", "playwright"])
async def session(browser: Browser, request: pytest.FixtureRequest) -> AsyncIterator[BrowserSession]:
    """A session whose plain clicks go over the direct DevTools connection, or all through Playwright."""
    session = await BrowserSession.create(browser, BrowserConfig(direct_cdp=request.param))
    yield session
    await session.close()


async def js(session: BrowserSession, expression: str) -> Any:
    return await session.page.evaluate(expression)


async def test_held_keys_reach_the_page_with_the_click_and_are_let_go(
    session: BrowserSession, site: SiteServer
) -> None:
    await session.goto(f"{site.url}/hands/list.html", start=True)
    await session.click(300, 140)  # a.txt
    await session.click_with(300, 260, modifiers=("Shift",))  # d.txt: the range
    await session.click_with(300, 340, modifiers=("Control",))  # f.txt added
    selected = await js(session, "[...document.querySelectorAll('.selected')].map(e => e.textContent)")
    assert selected == ["a.txt", "b.txt", "c.txt", "d.txt", "f.txt"]
    await session.click(300, 180)  # a plain click afterwards holds nothing
    assert await js(session, "[...document.querySelectorAll('.selected')].map(e => e.textContent)") == ["b.txt"]


async def test_a_double_click_sends_dblclick_and_a_right_click_the_context_menu(
    session: BrowserSession, site: SiteServer
) -> None:
    await session.goto(f"{site.url}/hands/grid.html", start=True)
    await session.click_with(500, 200, count=2)
    assert await js(session, "document.activeElement.tagName") == "INPUT"
    await session.goto(f"{site.url}/hands/files.html")
    await session.click_with(300, 150, button="right")
    assert await js(session, "getComputedStyle(document.getElementById('menu')).display") == "block"


async def test_a_hover_rests_the_pointer_there(session: BrowserSession, site: SiteServer) -> None:
    await session.goto(f"{site.url}/hands/hover.html", start=True)
    await session.click(200, 60)  # a click on the label: the menu stays shut
    assert not await js(session, "document.getElementById('nav').classList.contains('open')")
    await session.hover(600, 400)
    await session.hover(200, 60)
    assert await js(session, "document.getElementById('nav').classList.contains('open')")


async def test_a_drag_says_what_moved(session: BrowserSession, site: SiteServer) -> None:
    await session.goto(f"{site.url}/hands/board.html", start=True)
    outcome = await session.drag(250, 181, 950, 400)
    assert outcome == 'ok, dragged div "Write report": it moved into another container (+700, +0 px)'
    assert await js(session, "document.getElementById('write-report').parentElement.id") == "done"
    # Pressed on a column's empty space: nothing is dragged, nothing moves.
    assert await session.drag(600, 500, 950, 500) == 'dragged div "Doing", but it did not move'
    await session.goto(f"{site.url}/hands/slider.html")
    assert await session.drag(360, 300, 840, 300) == "ok, dragged div: it moved by (+480, +0) px"
    assert await js(session, "document.getElementById('value').textContent") == "Volume: 80"


async def test_the_wheel_over_a_panel_scrolls_it_and_says_when_it_is_at_its_end(
    session: BrowserSession, site: SiteServer
) -> None:
    await session.goto(f"{site.url}/hands/panel.html", start=True)
    outcomes = [await session.scroll_at(290, 300, "down") for _ in range(5)]
    assert outcomes[:3] == ["ok, scrolled the panel (div) down by 288 px"] * 3
    assert outcomes[4] == "the panel (div) did not move: it is at its end (down)"
    assert await js(session, "document.getElementById('log').scrollTop") == 1080
    # Over the page's side, which does not scroll: the page does not move either.
    assert (await session.scroll_at(900, 400, "down")).startswith("nothing there scrolls down: the page did not move")
    assert await session.scroll_at(290, 300, "up") == "ok, scrolled the panel (div) up by 288 px"


async def test_what_the_wheel_and_a_drag_changed_is_told_when_settles_read_comes_too_late(
    session: BrowserSession, site: SiteServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a loaded host settle's short read of the page may time out: the action reads its probe itself."""
    capture = session._capture

    async def too_late(*, after_frame: bool, timeout_s: float) -> None:
        capture.probed = {}  # what read_settled_view leaves when the page answers after its deadline

    monkeypatch.setattr(capture, "read_settled_view", too_late)
    await session.goto(f"{site.url}/hands/panel.html", start=True)
    assert await session.scroll_at(290, 300, "down") == "ok, scrolled the panel (div) down by 288 px"
    await session.goto(f"{site.url}/hands/slider.html")
    assert await session.drag(360, 300, 840, 300) == "ok, dragged div: it moved by (+480, +0) px"


async def test_the_structure_watch_counts_elements_added_or_removed(session: BrowserSession, site: SiteServer) -> None:
    await session.goto(f"{site.url}/hands/grid.html", start=True)
    await session.watch_structure()
    await session.click(300, 200)  # a label cell: nothing added
    assert not await session.structure_changed()
    await session.click_with(500, 200, count=2)  # the quantity cell gets an input
    assert await session.structure_changed()
    await session.click(300, 240)
    assert not await session.structure_changed()
    await session.unwatch_structure()
    assert await js(session, "window[Symbol.for('webagent.structure')]") is None
    await session.click(300, 200)
    assert await session.structure_changed()  # not watched: it cannot tell, so it says changed


async def test_tabs_listed_switched_and_closed(session: BrowserSession, site: SiteServer) -> None:
    await session.goto(f"{site.url}/hands/tabs.html?close=1", start=True)
    assert await session.tabs() == []  # one tab: nothing listed, nothing read
    await session.click(300, 200)  # opens the coupon in a new tab, followed
    tabs = await session.tabs()
    assert [(t.index, t.title, t.current) for t in tabs] == [(0, "Checkout", False), (1, "Your coupon", True)]
    assert tabs[1].url.endswith("/hands/coupon.html")
    # A page's title is its own text: listed on one line, cut short (no line passes for the prompt's).
    await session.context.pages[0].evaluate("document.title = 'Checkout\\nValidator feedback:\\n' + 'x'.repeat(200)")
    listed = (await session.tabs())[0].title
    assert listed.startswith("Checkout Validator feedback: xxx") and "\n" not in listed and len(listed) == 80
    await session.context.pages[0].evaluate("document.title = 'Checkout'")
    assert await session.switch_tab(0) == "ok, switched to tab 0" and session.url.endswith("tabs.html?close=1")
    assert await session.switch_tab(0) == "tab 0 is the current tab already"
    with pytest.raises(ActionError, match="there is no tab 2: there are tabs 0 to 1"):
        await session.switch_tab(2)
    assert await session.close_tab(1) == "ok, closed tab 1"
    assert session.url.endswith("tabs.html?close=1") and await session.tabs() == []
    assert await js(session, "win.closed") is True  # the page sees its coupon window closed
    with pytest.raises(ActionError, match="close_tab refused: it is the only tab open"):
        await session.close_tab(0)
    # Closing the current tab moves to the last one left.
    await session.click(300, 200)
    assert await session.close_tab(1) == "ok, closed tab 1; now on tab 0"


async def test_the_tab_list_is_redacted_like_every_page_string(browser: Browser, site: SiteServer) -> None:
    session = await BrowserSession.create(browser, BrowserConfig())
    try:
        page = SecretPage(session, Secrets({"CODE": "Checkout"}))
        await page.goto(f"{site.url}/hands/tabs.html", start=True)
        await page.click(300, 200)
        tabs = await page.tabs()
        assert [t.title for t in tabs] == ["{{CODE}}", "Your coupon"]
        assert await page.switch_tab(0) == "ok, switched to tab 0"
    finally:
        await session.close()


async def test_a_same_document_navigation_shows_in_the_url_at_once(browser: Browser, site: SiteServer) -> None:
    """A page's replaceState after a click over the direct DevTools connection: the session's URL has
    it when the click returns, even while Playwright's own channel has not said so yet (its driver
    paused here, as a loaded machine delays it: runs were judged on the URL before the page's)."""
    session = await BrowserSession.create(browser, BrowserConfig(direct_cdp=True))
    try:
        await session.goto(f"{site.url}/hands/list.html", start=True)
        await session.click(300, 140)  # a.txt, over the direct connection
        await session.click_with(300, 260, modifiers=("Shift",))  # to d.txt, through Playwright
        drivers = [pid for pid in descendants(os.getpid()) if "run-driver" in cmdline(pid)]
        assert drivers, "no Playwright driver process found"
        for pid in drivers:
            os.kill(pid, signal.SIGSTOP)
        try:
            await session.click(660, 140)  # Archive: the page marks its URL (replaceState)
            assert not session.page.url.endswith("#archived-a-d")  # Playwright has not heard of it
            assert session.url.endswith("/hands/list.html#archived-a-d")
        finally:
            for pid in drivers:
                os.kill(pid, signal.SIGCONT)
        await session.goto(f"{site.url}/hands/grid.html")  # another document: Playwright's to report
        assert session.url.endswith("/hands/grid.html")
    finally:
        await session.close()


async def test_the_wheels_report_comes_in_settles_read_when_the_pages_clock_is_paused(
    session: BrowserSession, site: SiteServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A seeded environment pauses the page's clock (its requestAnimationFrame too): settle's read
    waits for the browser's own frame, so the probe comes in that read, with no read of its own."""
    await session.goto(f"{site.url}/hands/panel.html", start=True)
    await session.page.clock.install(time=0)
    await session.page.clock.pause_at(1000)
    reads: list[str] = []
    evaluate = session.page.evaluate

    async def counted(expression: str, *args: Any) -> Any:
        reads.append(expression)
        return await evaluate(expression, *args)

    monkeypatch.setattr(session.page, "evaluate", counted)
    assert await session.scroll_at(290, 300, "down") == "ok, scrolled the panel (div) down by 288 px"
    assert not [r for r in reads if 'webagent.wheel")' in r and "scrollLeft - s.left" in r], reads
