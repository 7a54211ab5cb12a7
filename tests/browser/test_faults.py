"""Pages that misbehave, against a real Chromium: none hangs the session, each is reported.

The traps are the local site's ``/trouble/`` pages (``webagent.testing.trouble``). Every action
below would otherwise cost the whole settle cap (3 s) or hang: the elapsed-time bounds are loose
guards against that, not performance goals.
"""

from __future__ import annotations

import asyncio
import stat
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Browser
from playwright.async_api import TimeoutError as PlaywrightTimeoutError

from webagent.browser.faults import MAX_PAGE_CRASHES
from webagent.browser.session import BrowserSession
from webagent.config import BrowserConfig
from webagent.errors import ActionError, BrowserError, NavigationError
from webagent.images import frame_for
from webagent.testing.sites import SiteServer
from webagent.testing.trouble import DOWNLOAD_NAME, TRAPS

pytestmark = pytest.mark.browser

FRAME = frame_for(1280, 800, None)
SessionFactory = Callable[..., Awaitable[BrowserSession]]


def _factory(browser: Browser, sessions: list[BrowserSession]) -> SessionFactory:
    async def factory(**config: Any) -> BrowserSession:
        session = await BrowserSession.create(browser, BrowserConfig(**config))
        sessions.append(session)
        return session

    return factory


@pytest.fixture
async def make_session(browser: Browser) -> AsyncIterator[SessionFactory]:
    sessions: list[BrowserSession] = []
    yield _factory(browser, sessions)
    for session in sessions:
        await session.close()


def saved_file(path: str) -> tuple[bytes, int, int]:
    """A kept download's bytes, its folder's mode and its own."""
    file = Path(path)
    return file.read_bytes(), stat.S_IMODE(file.parent.stat().st_mode), stat.S_IMODE(file.stat().st_mode)


async def told(session: BrowserSession) -> list[str]:
    """The events drained now, and at the next observations until a download's line is among them:
    one the browser announces only after the page settled (a loaded machine) is told later."""
    events = session.drain_events()
    for _ in range(100):
        if any("download" in e.lower() and "in progress" not in e for e in events):
            break
        await asyncio.sleep(0.1)
        events += session.drain_events()
    return [e for e in events if "in progress" not in e]


async def click(session: BrowserSession, trap: str) -> float:
    """Click a trap; the seconds it took."""
    started = time.monotonic()
    await session.click(*TRAPS[trap])
    return time.monotonic() - started


async def test_a_download_is_kept_and_told_without_waiting(make_session: SessionFactory, site: SiteServer) -> None:
    session = await make_session(settle_timeout_s=20.0)
    await session.goto(site.url + "/trouble/")
    elapsed = await click(session, "download link")
    assert elapsed < 10.0  # not the 20 s settle cap: the navigation it asked for never commits
    assert session.url == site.url + "/trouble/"
    size = len(b"webagent test download\n" * 64)
    assert await told(session) == [f"Downloaded: {DOWNLOAD_NAME} ({size} bytes)"]
    [kept] = session.downloads
    assert (kept.name, kept.bytes, kept.url) == (DOWNLOAD_NAME, size, f"{site.url}/trouble/download.bin")
    # A session given no folder keeps them in a private temporary one of its own, removed when it closes.
    assert saved_file(kept.path) == (b"webagent test download\n" * 64, 0o700, 0o600)
    await session.screenshot(FRAME)
    await session.close()
    assert not Path(kept.path).parent.exists()


async def test_a_refused_download_is_cancelled_and_told_without_waiting(
    make_session: SessionFactory, site: SiteServer
) -> None:
    session = await make_session(settle_timeout_s=20.0, downloads="refuse")
    await session.goto(site.url + "/trouble/")
    elapsed = await click(session, "download link")
    assert elapsed < 10.0
    assert session.url == site.url + "/trouble/"
    assert await told(session) == [
        f"The page started a download of {DOWNLOAD_NAME!r}; downloads are refused "
        '([browser] downloads = "refuse"), so it was cancelled.'
    ]
    assert session.downloads == []
    await session.screenshot(FRAME)


async def test_a_tab_driven_again_reports_each_event_once(make_session: SessionFactory, site: SiteServer) -> None:
    # The session goes to a new tab and comes back when it closes itself: the page it comes back to
    # must not get a second set of handlers (a download reported twice).
    session = await make_session()
    await session.goto(site.url + "/trouble/")
    trouble = session.page
    await trouble.evaluate(
        'document.body.insertAdjacentHTML(\'beforeend\', \'<a href="/trouble/guarded" target="_blank" '
        'style="position:absolute;left:600px;top:100px;width:200px;height:50px;display:block">tab</a>\')'
    )
    await session.click(700, 125)
    assert session.page is not trouble
    await session.page.evaluate(
        'document.body.innerHTML = \'<button style="position:fixed;left:0;top:0;width:400px;height:400px" '
        'onclick="window.close()">close</button>\''
    )
    await session.click(200, 200)
    assert session.page is trouble
    session.drain_events()
    await click(session, "download link")
    events = await told(session)
    await asyncio.sleep(0.5)  # a second handler would tell it again meanwhile
    events += session.drain_events()
    assert sum("download" in e.lower() for e in events) == 1, events


async def test_a_file_chooser_is_dismissed_and_reported(make_session: SessionFactory, site: SiteServer) -> None:
    session = await make_session()
    await session.goto(site.url + "/trouble/")
    assert await click(session, "file input") < 1.5
    await session.screenshot(FRAME)  # the next observation, where the loop reads the events
    events = session.drain_events()  # at this very observation, not one later
    assert events == ["A file chooser opened and was dismissed; to upload an allowed file, use upload_file."]
    await session.click(*TRAPS["guarded page link"])  # the page still takes input
    assert session.url == site.url + "/trouble/guarded"


async def test_a_redirect_loop_behind_a_link_is_a_reported_failure(
    make_session: SessionFactory, site: SiteServer
) -> None:
    session = await make_session()
    await session.goto(site.url + "/trouble/")
    assert await click(session, "redirect loop link") < 2.5
    assert session.drain_events() == [f"Opening {site.url}/trouble/loop failed: net::ERR_TOO_MANY_REDIRECTS."]
    assert session.url == "chrome-error://chromewebdata/"  # settled on Chromium's error page
    await session.screenshot(FRAME)
    await session.go_back()  # the error page is a history entry like any other
    assert session.url == site.url + "/trouble/"


async def test_a_navigation_that_fails_after_the_settle_cap_is_reported_at_the_next_observation(
    make_session: SessionFactory, site: SiteServer
) -> None:
    # The slow loop fails ~2 s after the click, long after the 0.3 s cap: the action's observation
    # says the page was still loading, and the failure is not lost but reported when it comes.
    session = await make_session(settle_timeout_s=0.3)
    await session.goto(site.url + "/trouble/")
    failed = asyncio.ensure_future(session.page.wait_for_event("requestfailed", timeout=30_000))
    await click(session, "slow redirect loop link")
    assert session.drain_events() == ["The page was still loading after 0.3 s."]
    await failed  # the session's own listener was registered first: it has run
    assert session.drain_events() == [f"Opening {site.url}/trouble/slow-loop failed: net::ERR_TOO_MANY_REDIRECTS."]


async def test_a_failed_navigation_is_not_also_reported_as_still_loading(
    make_session: SessionFactory, site: SiteServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # On a loaded machine the cap can run out after the failure is known, before the load of
    # Chromium's error page is seen: the failure is the report, not "still loading" beside it.
    session = await make_session(settle_timeout_s=10.0)
    await session.goto(site.url + "/trouble/")

    async def too_late(*args: Any, **kwargs: Any) -> None:
        raise PlaywrightTimeoutError("Timeout 1ms exceeded.")

    monkeypatch.setattr(session.page, "wait_for_load_state", too_late)
    await click(session, "redirect loop link")
    assert session.drain_events() == [f"Opening {site.url}/trouble/loop failed: net::ERR_TOO_MANY_REDIRECTS."]


async def test_goto_a_redirect_loop_then_elsewhere(make_session: SessionFactory, site: SiteServer) -> None:
    session = await make_session()
    with pytest.raises(NavigationError, match="ERR_TOO_MANY_REDIRECTS"):
        await session.goto(site.url + "/trouble/loop", start=True)
    # The failed navigation's error page commits a moment later; the next goto must still work.
    await session.goto(site.url + "/trouble/")
    assert session.url == site.url + "/trouble/"
    with pytest.raises(ActionError, match="ERR_TOO_MANY_REDIRECTS"):
        await session.goto(site.url + "/trouble/loop")
    await session.goto(site.url + "/catalog/")
    assert session.url == site.url + "/catalog/"
    assert session.drain_events() == []  # a goto reports its failure as its error, not again as an event


async def test_a_page_that_never_finishes_loading(make_session: SessionFactory, site: SiteServer) -> None:
    session = await make_session(settle_timeout_s=0.5, navigation_timeout_s=0.5)
    await session.goto(site.url + "/trouble/")
    elapsed = await click(session, "never loading link")
    assert elapsed < 10.0  # it never loads: only the 0.5 s cap ends the wait (a wide margin for loaded CI)
    assert session.url == site.url + "/trouble/never-loads"
    assert session.drain_events() == ["The page was still loading after 0.5 s."]
    await session.screenshot(FRAME)
    assert await session.title() == "Still loading"

    started = time.monotonic()
    await session.goto(site.url + "/trouble/never-loads")
    assert time.monotonic() - started < 2.0
    assert session.drain_events() == ["The page was still loading after 0.5 s."]
    await session.goto(site.url + "/trouble/")
    assert session.url == site.url + "/trouble/"


async def test_beforeunload_is_accepted(make_session: SessionFactory, site: SiteServer) -> None:
    session = await make_session()
    await session.goto(site.url + "/trouble/guarded")
    await session.click(900, 600)  # a user gesture: Chromium only asks pages that had one
    await session.click(*TRAPS["download link"])  # row 0 on this page: back to /trouble/
    assert session.url == site.url + "/trouble/"
    assert session.drain_events() == ["A JavaScript beforeunload dialog appeared (it was accepted)."]

    await session.goto(site.url + "/trouble/guarded")
    await session.click(900, 600)
    await session.goto(site.url + "/catalog/")
    assert session.url == site.url + "/catalog/"


# -- renderer crashes -----------------------------------------------------------------------------


async def crash(session: BrowserSession) -> None:
    """Crash the page's renderer through DevTools (Page.crash never answers)."""
    page = session.page
    cdp = await session.context.new_cdp_session(page)
    crashed = asyncio.ensure_future(page.wait_for_event("crash", timeout=10_000))
    sent = asyncio.ensure_future(cdp.send("Page.crash"))
    await crashed
    sent.cancel()
    await asyncio.gather(sent, return_exceptions=True)


async def test_a_crashed_page_is_reopened_at_its_url(own_browser: Browser, site: SiteServer) -> None:
    session = await BrowserSession.create(own_browser, BrowserConfig())
    try:
        await session.goto(site.url + "/catalog/")
        await session.screenshot(FRAME)  # the DevTools session exists before the crash
        crashed_page = session.page
        await crash(session)

        with pytest.raises(ActionError, match="crashed"):
            await session.click(10, 10)
        started = time.monotonic()
        shot = await session.screenshot(FRAME)
        assert time.monotonic() - started < 5.0 and shot.b64
        assert session.page is not crashed_page and crashed_page.is_closed()
        assert session.context.pages == [session.page]
        assert session.url == site.url + "/catalog/"
        assert session.drain_events() == [
            f"The page crashed (its renderer process died); the agent reopened {site.url}/catalog/ in a new tab."
        ]
        await session.click(560, 128)  # the fresh page takes input
        await session.goto(site.url + "/form/")
        assert await session.title()
    finally:
        await session.close()


async def test_a_crash_of_the_tab_left_behind_does_not_reopen_the_new_one(
    own_browser: Browser, site: SiteServer
) -> None:
    session = await BrowserSession.create(own_browser, BrowserConfig())
    try:
        await session.goto(site.url + "/catalog/")
        await session.screenshot(FRAME)
        old = session.page
        await crash(session)  # the old tab's renderer dies as the page opens a new one
        new = await session.context.new_page()
        await new.goto(site.url + "/form/")
        session._state.switch_to(new)  # what the tab follower does
        await session.screenshot(FRAME)
        assert session.page is new and not new.is_closed()  # driven as it is, not reopened
        assert not any("crashed" in e for e in session.drain_events())
        assert old is not new
    finally:
        await session.close()


async def test_a_crash_before_the_first_screenshot_and_goto_after_a_crash(
    own_browser: Browser, site: SiteServer
) -> None:
    session = await BrowserSession.create(own_browser, BrowserConfig())
    try:
        await session.goto(site.url + "/catalog/")
        await crash(session)
        await session.screenshot(FRAME)  # no DevTools session yet: Page.enable would never answer
        assert session.url == site.url + "/catalog/"
        session.drain_events()
        await crash(session)
        await session.goto(site.url + "/form/")  # a goto replaces the crashed page and goes on
        assert session.url == site.url + "/form/"
        await session.screenshot(FRAME)
        assert session.drain_events() == []
    finally:
        await session.close()


async def test_a_page_that_crashes_again_while_it_is_reopened_is_reopened_again(
    own_browser: Browser, site: SiteServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As when renderers are killed one after the other under load (benchmarks/soak.py --kill renderers)."""
    session = await BrowserSession.create(own_browser, BrowserConfig())
    try:
        await session.goto(site.url + "/catalog/")
        await crash(session)
        load, loads = session._faults.load, []

        async def load_then_crash(url: str) -> None:
            await load(url)
            loads.append(url)
            if len(loads) == 1:
                await crash(session)  # the fresh tab's renderer dies too, before any DevTools session

        monkeypatch.setattr(session._faults, "load", load_then_crash)
        started = time.monotonic()
        shot = await session.screenshot(FRAME)
        assert shot.b64 and time.monotonic() - started < 10.0
        assert loads == [site.url + "/catalog/"] * 2
        assert session.url == site.url + "/catalog/" and session.context.pages == [session.page]
        assert len(session.drain_events()) == 2  # the policy is told of each reopening
    finally:
        await session.close()


async def test_a_crash_while_the_start_page_loads_opens_it_in_a_new_tab(
    own_browser: Browser, site: SiteServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = await BrowserSession.create(own_browser, BrowserConfig())
    try:
        await session.goto(site.url + "/form/")
        first = session.page
        load, loads = session._faults.load, []

        async def crash_then_load(url: str) -> None:
            loads.append(url)
            if len(loads) == 1:
                await crash(session)  # the renderer dies as the navigation starts
            await load(url)

        monkeypatch.setattr(session._faults, "load", crash_then_load)
        await session.goto(site.url + "/catalog/", start=True)  # not a NavigationError: the site is fine
        assert loads == [site.url + "/catalog/"] * 2
        assert session.page is not first and session.url == site.url + "/catalog/"
        assert (await session.screenshot(FRAME)).b64
    finally:
        await session.close()


async def test_repeated_crashes_end_the_run(own_browser: Browser, site: SiteServer) -> None:
    session = await BrowserSession.create(own_browser, BrowserConfig())
    try:
        await session.goto(site.url + "/catalog/")
        for _ in range(MAX_PAGE_CRASHES):
            await crash(session)
            await session.screenshot(FRAME)
        assert len(session.drain_events()) == MAX_PAGE_CRASHES
        await crash(session)
        with pytest.raises(BrowserError, match=f"crashed {MAX_PAGE_CRASHES + 1} times"):
            await session.screenshot(FRAME)
        assert own_browser.is_connected()
    finally:
        await session.close()


async def test_a_crash_of_a_callers_page_ends_the_run(own_browser: Browser, site: SiteServer) -> None:
    context = await own_browser.new_context()
    try:
        page = await context.new_page()
        session = BrowserSession(page, BrowserConfig())
        await session.goto(site.url + "/catalog/")
        await crash(session)
        with pytest.raises(BrowserError, match="the page crashed"):
            await session.screenshot(FRAME)
        assert context.pages == [page]  # not replaced behind the caller's back
    finally:
        await context.close()
