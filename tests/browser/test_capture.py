"""The capture that ``settle`` starts ahead of the next screenshot: used only when it shows the settled page.

Each test clicks, then takes the screenshot the agent's next step would take, and checks its pixels
against what the page shows after the action; ``prefetched_shots`` says whether the early capture
was the one returned.
"""

from __future__ import annotations

import asyncio
import io
from collections.abc import AsyncIterator
from urllib.parse import quote

import pytest
from PIL import Image
from playwright.async_api import Browser

from webagent.browser.session import BrowserSession
from webagent.config import PROFILES, BrowserConfig
from webagent.images import Frame, Screenshot, frame_for
from webagent.testing.sites import SiteServer

pytestmark = pytest.mark.browser

RED, GREEN, BLUE = (255, 0, 0), (0, 160, 0), (0, 0, 255)
SCALED = frame_for(1280, 800, PROFILES["holo1.5"])
NATIVE = frame_for(1280, 800, None)

# A full-width panel (0..1280, 200..600) that cycles red -> green -> blue on each click.
CYCLE = """<!doctype html><html><body style="margin:0;height:3000px">
<div id="panel" style="position:absolute;left:0;top:200px;width:1280px;height:400px;background:rgb(255,0,0)"
 onclick="const c=['rgb(255,0,0)','rgb(0,160,0)','rgb(0,0,255)'];
 this.dataset.n=(+this.dataset.n||0)+1; this.style.background=c[this.dataset.n%3]"></div>
</body></html>"""

# A link at the top (0..400, 0..60) to an anchor 2000 px down, where a red band starts.
ANCHOR = """<!doctype html><html><body style="margin:0;height:5000px">
<a href="#down" style="position:absolute;left:0;top:0;width:400px;height:60px;display:block">down</a>
<div id="down" style="position:absolute;left:0;top:2000px;width:1280px;height:300px;background:rgb(255,0,0)"></div>
</body></html>"""

# The CYCLE panel, each click of which also pushes a history entry (a same-document navigation).
PUSH = CYCLE.replace('onclick="', "onclick=\"history.pushState(null, '', '#n' + ((+this.dataset.n||0) + 1)); ")

# A button (0..400, 0..100) that raises an alert, then turns the page green.
ALERT = """<!doctype html><html><body style="margin:0;background:rgb(255,0,0)">
<button style="position:absolute;left:0;top:0;width:400px;height:100px"
 onclick="alert('hello'); document.body.style.background='rgb(0,160,0)'">go</button>
</body></html>"""

# A button (0..400, 0..100) that turns the page green 200 ms later.
LATER = """<!doctype html><html><body style="margin:0;background:rgb(255,0,0)">
<button style="position:absolute;left:0;top:0;width:400px;height:100px"
 onclick="setTimeout(() => document.body.style.background='rgb(0,160,0)', 200)">go</button>
</body></html>"""


@pytest.fixture
async def session(browser: Browser) -> AsyncIterator[BrowserSession]:
    session = await BrowserSession.create(browser, BrowserConfig())
    yield session
    await session.close()


def colour(shot: Screenshot, x: float, y: float) -> tuple[int, int, int]:
    """The pixel at viewport CSS point (x, y) of a screenshot."""
    image = Image.open(io.BytesIO(shot.data())).convert("RGB")
    assert image.size == (shot.frame.image_width, shot.frame.image_height)
    px, py = shot.frame.to_image(x, y)
    pixel = image.getpixel((int(px), int(py)))
    assert isinstance(pixel, tuple)
    return (int(pixel[0]), int(pixel[1]), int(pixel[2]))


def near(actual: tuple[int, int, int], expected: tuple[int, int, int]) -> bool:
    return all(abs(a - b) <= 40 for a, b in zip(actual, expected, strict=True))


async def open_html(session: BrowserSession, html: str, frame: Frame) -> Screenshot:
    await session.page.set_content(html)
    return await session.screenshot(frame)  # the agent's first observation: sets the frame


@pytest.mark.parametrize("frame", [SCALED, NATIVE], ids=["scaled", "native"])
async def test_each_click_s_effect_is_in_the_capture_taken_ahead(session: BrowserSession, frame: Frame) -> None:
    await session.page.set_viewport_size({"width": 1280, "height": 800})
    await session.page.set_content(CYCLE)
    await session.page.evaluate("window.scrollTo(0, 100)")  # the clip follows a scrolled page
    await session.page.evaluate("new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
    first = await session.screenshot(frame)
    assert near(colour(first, 640, 300), RED)

    for n, expected in enumerate([GREEN, BLUE, RED, GREEN], start=1):
        await session.click(640, 300)  # the panel is at viewport y 100..500 after the scroll
        shot = await session.screenshot(frame)
        assert near(colour(shot, 640, 300), expected), f"click {n}: {colour(shot, 640, 300)}"
        assert near(colour(shot, 640, 50), (255, 255, 255)), "the clip is at the page's scroll offsets"
    # Taken by settle (a check slower than its 0.5 s cap on a loaded machine drops one: allowed).
    assert session.prefetched_shots >= 3


async def test_a_same_document_navigation_keeps_the_capture_taken_ahead(session: BrowserSession) -> None:
    await open_html(session, PUSH, SCALED)
    for n, expected in enumerate([GREEN, BLUE, RED] * 2, start=1):
        await session.click(640, 300)  # pushState: no new document, nothing to wait for
        shot = await session.screenshot(SCALED)
        assert session.url.endswith(f"#n{n}")
        assert near(colour(shot, 640, 300), expected), f"click {n}: {colour(shot, 640, 300)}"
    # Kept although the URL changed (on a loaded machine a capture that raced the paint is dropped,
    # and taken afresh: a few may be).
    assert session.prefetched_shots >= 3


@pytest.mark.parametrize(
    ("kind", "waited_for"),
    [
        ("differentDocument", True),
        ("historyDifferentDocument", True),
        ("reload", True),
        ("sameDocument", False),
        ("historySameDocument", False),
    ],
)
async def test_which_navigation_starts_settle_waits_for(session: BrowserSession, kind: str, waited_for: bool) -> None:
    await session.screenshot(SCALED)  # sets up the session's CDP session and learns the main frame
    session._settler._on_started_navigating({"frameId": session._state.main_frame_id, "navigationType": kind})
    assert session._state.nav.requested is waited_for
    session._state.nav.requested = False
    session._settler._on_started_navigating({"frameId": "a frame of the page", "navigationType": kind})
    assert session._state.nav.requested is False  # only the main frame's navigations count


async def test_a_page_changed_directly_after_a_click_is_captured_afresh(session: BrowserSession) -> None:
    await open_html(session, CYCLE, SCALED)

    await session.click(640, 300)  # green, captured ahead
    await session.page.evaluate("document.getElementById('panel').style.background = 'rgb(0,0,255)'")
    session.invalidate_capture()
    shot = await session.screenshot(SCALED)

    assert session.prefetched_shots == 0
    assert near(colour(shot, 640, 300), BLUE)


async def test_a_click_that_scrolls_the_page_is_captured_at_the_new_offsets(session: BrowserSession) -> None:
    before = await open_html(session, ANCHOR, SCALED)
    assert not near(colour(before, 640, 100), RED)

    await session.click(200, 30)  # to #down: the page jumps 2000 px
    shot = await session.screenshot(SCALED)

    assert await session.page.evaluate("window.scrollY") == 2000
    assert session.prefetched_shots == 0, "a capture at the old offsets is dropped"
    assert near(colour(shot, 640, 100), RED)


async def test_a_click_that_navigates_is_captured_on_the_new_page(session: BrowserSession, site: SiteServer) -> None:
    link = f"""<!doctype html><html><body style="margin:0;background:rgb(255,0,0)">
    <a href="{site.url}/bench/" style="position:absolute;left:0;top:0;width:400px;height:100px;display:block">go</a>
    </body></html>"""
    await open_html(session, link, SCALED)

    await session.click(200, 50)
    shot = await session.screenshot(SCALED)

    assert session.url == f"{site.url}/bench/"
    assert session.prefetched_shots == 0
    assert near(colour(shot, 640, 30), (0x1F, 0x3A, 0x68)), "the bench page's header, not the red page"


async def test_a_dialog_during_the_click_drops_the_capture(session: BrowserSession) -> None:
    await open_html(session, ALERT, SCALED)

    await session.click(200, 50)
    shot = await session.screenshot(SCALED)

    assert session.prefetched_shots == 0
    assert any("alert" in event for event in session.drain_events())
    assert near(colour(shot, 640, 400), GREEN)


async def test_a_wait_after_a_click_is_not_answered_by_the_click_s_capture(session: BrowserSession) -> None:
    await open_html(session, LATER, SCALED)

    await session.click(200, 50)  # kept: nothing had changed yet when settle checked
    await session.wait(0.5)  # the page turns green meanwhile
    shot = await session.screenshot(SCALED)

    assert session.prefetched_shots == 0
    assert near(colour(shot, 640, 400), GREEN)


async def test_an_action_after_a_click_drops_its_capture(session: BrowserSession) -> None:
    await open_html(session, CYCLE, SCALED)

    await session.click(640, 300)  # green, captured ahead
    await session.scroll("down")  # no capture ahead after scrolling
    shot = await session.screenshot(SCALED)

    assert session.prefetched_shots == 0
    assert await session.page.evaluate("window.scrollY") > 0
    assert near(colour(shot, 640, 300), (255, 255, 255)), "the green panel was scrolled out of view"


async def test_a_caller_s_own_page_is_never_captured_ahead(browser: Browser) -> None:
    context = await browser.new_context(viewport={"width": 1280, "height": 800})
    try:
        session = BrowserSession(await context.new_page(), BrowserConfig())
        await open_html(session, CYCLE, SCALED)

        await session.click(640, 300)
        await session.page.evaluate("document.getElementById('panel').style.background = 'rgb(0,0,255)'")
        shot = await session.screenshot(SCALED)  # the caller changed the page between the steps

        assert session.prefetched_shots == 0
        assert near(colour(shot, 640, 300), BLUE)
        await session.close()
    finally:
        await context.close()


async def test_events_of_a_dropped_cdp_session_are_ignored(session: BrowserSession) -> None:
    await session.screenshot(SCALED)
    own = session._state.cdp
    assert own is not None
    seen: list[object] = []
    forward = session._state._while_current(own, seen.append)
    forward({"n": 1})
    session._state.cdp = None  # what a tab switch or a crash reopen does: that page's session is left behind
    forward({"n": 2})
    assert seen == [{"n": 1}]
    session._state.cdp = own


# A text field, focused: its caret blinks (every 0.5 s) unless hidden.
FOCUSED = (
    "<!doctype html><html><body style='margin:0'>"
    "<input id='field' value='hello' style='position:absolute;left:100px;top:100px;font-size:40px'>"
    "<script>document.getElementById('field').focus()</script></body></html>"
)


async def distinct_captures(session: BrowserSession, n: int = 8) -> int:
    """Captures of the page as it is, 0.3 s apart (longer than a blink, altogether several): how many differ."""
    seen = set()
    for _ in range(n):
        session.invalidate_capture()
        seen.add((await session.screenshot(NATIVE)).b64)
        await asyncio.sleep(0.3)
    return len(seen)


@pytest.mark.parametrize("hide_caret", [True, False])
async def test_the_caret_is_hidden_so_that_an_unchanged_page_captures_the_same(
    browser: Browser, hide_caret: bool
) -> None:
    # Otherwise a focused field makes every "nothing changed" comparison fail (and replays miss).
    session = await BrowserSession.create(browser, BrowserConfig(hide_caret=hide_caret))
    try:
        await session.goto("data:text/html," + quote(FOCUSED))
        assert await session.page.evaluate("document.activeElement.id") == "field"
        await session.screenshot(NATIVE)  # the session's CDP session is set up on the first observation
        assert (await distinct_captures(session) == 1) is hide_caret
        # In each new document of the tab too, under a Content-Security-Policy that forbids styles.
        csp = "<meta http-equiv='Content-Security-Policy' content=\"style-src 'none'\">"
        await session.goto("data:text/html," + quote(csp + FOCUSED.replace("hello", "again")))
        assert (await distinct_captures(session) == 1) is hide_caret
    finally:
        await session.close()


async def test_a_caller_s_page_gets_its_caret_back(browser: Browser) -> None:
    context = await browser.new_context(viewport={"width": 1280, "height": 800})
    try:
        page = await context.new_page()
        await page.set_content(FOCUSED)
        caret = "getComputedStyle(document.getElementById('field')).caretColor"
        shown = await page.evaluate(caret)
        session = BrowserSession(page, BrowserConfig())
        await session.screenshot(NATIVE)
        assert await page.evaluate(caret) == "rgba(0, 0, 0, 0)"  # hidden while the session drives it
        await session.close()
        assert await page.evaluate(caret) == shown != "rgba(0, 0, 0, 0)"
        assert await page.evaluate("document.adoptedStyleSheets.length") == 0
    finally:
        await context.close()
