"""Every browser command has a deadline, and a screenshot that does not come is recovered.

Chromium really does leave some commands unanswered: a ``Runtime.evaluate`` awaiting a promise that
never settles is the simplest, and stands in here for a ``Page.captureScreenshot`` that never comes
(see docs/faults.md for when Chromium does that).
"""

from __future__ import annotations

import asyncio
import io
import threading
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from PIL import Image
from playwright.async_api import Browser
from playwright.async_api import Error as PlaywrightError

from webagent.browser.capture import MAX_PAGE_REOPENS
from webagent.browser.deadline import BoundedCDPSession, CommandTimeout, on_wait_over, within
from webagent.browser.devtools import DevToolsSession
from webagent.browser.guard import NavigationGuard
from webagent.browser.session import BrowserSession
from webagent.config import PROFILES, BrowserConfig
from webagent.errors import ActionError, BrowserTimeoutError
from webagent.guard.navigation import NavigationPolicy, parse_rules
from webagent.images import frame_for
from webagent.testing.sites import SiteServer

pytestmark = pytest.mark.browser

FRAME = frame_for(1280, 800, PROFILES["holo1.5"])
NEVER = {"expression": "new Promise(() => {})", "awaitPromise": True}
CONFIG = BrowserConfig(capture_timeout_s=2.0, command_timeout_s=5.0)  # generous: CI may be busy


@pytest.fixture
async def session(browser: Browser) -> AsyncIterator[BrowserSession]:
    session = await BrowserSession.create(browser, CONFIG)
    yield session
    await session.close()


class Unanswered:
    """The session's own CDP channel, except that its first ``drop`` screenshots are never answered
    (like a capture that Chromium drops): each is sent as a command that never settles, under the
    same deadline."""

    def __init__(self, channel: Any, drop: int = 1000) -> None:
        self.channel = channel
        self.drop = drop
        self.dropped = 0

    def _swap(self, method: str, params: dict[str, Any] | None) -> tuple[str, dict[str, Any] | None]:
        if method == "Page.captureScreenshot" and self.dropped < self.drop:
            self.dropped += 1
            return "Runtime.evaluate", NEVER
        return method, params

    async def send(self, method: str, params: dict[str, Any] | None = None, *, timeout_s: float | None = None) -> Any:
        method, params = self._swap(method, params)
        return await self.channel.send(method, params, timeout_s=timeout_s)

    def on(self, event: str, f: Any) -> None:
        self.channel.on(event, f)

    async def detach(self) -> None:
        await self.channel.detach()


async def test_a_direct_devtools_command_past_its_deadline_fails_and_is_forgotten(session: BrowserSession) -> None:
    cdp = await session._state.cdp_session()
    assert isinstance(cdp, DevToolsSession), "the shared test browser has a direct DevTools connection"
    with pytest.raises(CommandTimeout, match=r"Runtime.evaluate: no answer from the browser within 0.3 s"):
        await cdp.send("Runtime.evaluate", NEVER, timeout_s=0.3)
    assert not cdp._devtools._pending  # no reply is waited for any more
    reply = await cdp.send("Runtime.evaluate", {"expression": "1 + 1", "returnByValue": True})
    assert reply["result"]["value"] == 2  # the session goes on


async def test_a_playwright_cdp_command_past_its_deadline_fails(session: BrowserSession) -> None:
    raw = await session.context.new_cdp_session(session.page)
    bounded = BoundedCDPSession(raw, timeout_s=0.3)
    with pytest.raises(CommandTimeout):
        await bounded.send("Runtime.evaluate", NEVER)
    await bounded.detach()


async def test_within_cancels_what_it_waits_for() -> None:
    started = asyncio.Event()
    cancelled = False

    async def forever() -> None:
        nonlocal cancelled
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled = True
            raise

    with pytest.raises(CommandTimeout, match=r"forever: no answer from the browser within 0\.05 s"):
        await within(forever(), 0.05, "forever")
    assert started.is_set() and cancelled


async def test_a_bounded_wait_that_ends_is_progress_and_a_cancelled_one_is_not() -> None:
    ended: list[str] = []

    async def answer() -> str:
        return "ok"

    async def fail() -> None:
        raise PlaywrightError("Target crashed")

    async def run() -> None:  # in its own task, as a batch runs each task
        on_wait_over.set(lambda: ended.append("wait over"))
        assert await within(answer(), 1.0, "answer") == "ok"
        with pytest.raises(CommandTimeout):
            await within(asyncio.Event().wait(), 0.01, "forever")
        with pytest.raises(PlaywrightError):
            await within(fail(), 1.0, "fail")
        assert len(ended) == 3
        waiting = asyncio.create_task(within(asyncio.Event().wait(), 10.0, "forever"))
        await asyncio.sleep(0.01)
        waiting.cancel()  # the run itself cancelled: no progress
        with pytest.raises(asyncio.CancelledError):
            await waiting

    await asyncio.create_task(run())
    assert ended == ["wait over"] * 3
    assert on_wait_over.get() is None  # set in the run's task only


def _colour(data: bytes, x: int, y: int) -> tuple[int, int, int]:
    image = Image.open(io.BytesIO(data)).convert("RGB")
    pixel = image.getpixel(FRAME.to_image(x, y))
    assert isinstance(pixel, tuple)
    return (int(pixel[0]), int(pixel[1]), int(pixel[2]))


GREEN_PAGE = "<!doctype html><body style='margin:0;background:rgb(0,160,0)'><h1>green</h1></body>"


@pytest.mark.parametrize("drop", [1, 2])
async def test_a_screenshot_that_does_not_come_is_taken_again(session: BrowserSession, drop: int) -> None:
    """Once more on the same CDP session (what a capture lost to a navigation's commit needs), and if
    that is not answered either, on a new one."""
    await session.page.set_content(GREEN_PAGE)
    await session.screenshot(FRAME)
    dropping = Unanswered(await session._state.cdp_session(), drop=drop)
    session._state.cdp = dropping  # type: ignore[assignment]
    shot = await session.screenshot(FRAME)
    assert dropping.dropped == drop
    assert _colour(shot.data(), 640, 400)[1] > 120  # the page's green, taken another way
    assert session.captures_recovered == 1 and session.pages_replaced == 0
    recoveries = session.drain_recoveries()
    assert len(recoveries) == 1 and "did not come within 2 s" in recoveries[0]
    assert ("new DevTools session" in recoveries[0]) == (drop == 2)
    assert session.drain_events() == []  # nothing the policy needs to know


async def test_a_page_that_gives_no_screenshot_is_reopened_and_the_policy_told(
    browser: Browser, site: SiteServer
) -> None:
    session = await BrowserSession.create(browser, CONFIG)
    try:
        url = site.url + "/catalog/"
        await session.goto(url, start=True)
        await session.screenshot(FRAME)
        stuck = session.page
        session._state.cdp = Unanswered(await session._state.cdp_session())  # type: ignore[assignment]

        async def no_luck(params: dict[str, Any]) -> dict[str, Any]:
            raise CommandTimeout("Page.captureScreenshot: no answer from the browser within 2 s")

        session._capture._capture_on_new_session = no_luck  # type: ignore[method-assign]
        shot = await session.screenshot(FRAME)
        assert session.page is not stuck and stuck.is_closed()  # a fresh tab in the same context
        assert session.page.context is stuck.context and session.url == url
        assert shot.data()[:2] == b"\xff\xd8"  # a JPEG of the reopened page
        assert session.pages_replaced == 1
        events = session.drain_events()
        assert any("stopped responding" in e and url in e for e in events)
        assert any("reopened" in r for r in session.drain_recoveries())
        await session.click(640, 400)  # the reopened page is driven as usual
    finally:
        await session.close()


async def test_a_page_that_keeps_giving_no_screenshot_is_reopened_a_bounded_number_of_times(
    browser: Browser, site: SiteServer
) -> None:
    session = await BrowserSession.create(browser, BrowserConfig(capture_timeout_s=0.5, command_timeout_s=5.0))

    async def no_luck(params: dict[str, Any]) -> dict[str, Any]:
        raise CommandTimeout("Page.captureScreenshot: no answer from the browser within 0.5 s")

    try:
        await session.goto(site.url + "/catalog/", start=True)
        session._capture._capture_on_new_session = no_luck  # type: ignore[method-assign]
        for reopened in range(1, MAX_PAGE_REOPENS + 1):
            session._state.cdp = Unanswered(await session._state.cdp_session())  # type: ignore[assignment]
            await session.screenshot(FRAME)
            assert session.pages_replaced == reopened
        session._state.cdp = Unanswered(await session._state.cdp_session())  # type: ignore[assignment]
        with pytest.raises(BrowserTimeoutError, match=f"reopened {MAX_PAGE_REOPENS} times") as caught:
            async with asyncio.timeout(30):
                await session.screenshot(FRAME)
        assert session.pages_replaced == MAX_PAGE_REOPENS
        assert caught.value.infrastructure  # the browser's failure, not the task's: a batch re-runs it
    finally:
        await session.close()


async def test_a_page_whose_main_thread_never_returns_fails_the_action_not_the_run(session: BrowserSession) -> None:
    await session.page.set_content(
        "<!doctype html><button style='position:absolute;left:0;top:0;width:400px;height:100px'"
        " onclick='for(;;){}'>spin</button>"
    )
    await session.screenshot(FRAME)
    with pytest.raises(ActionError, match="did not respond within"):
        async with asyncio.timeout(30):  # a missing deadline fails here instead of hanging the suite
            await session.click(200, 50)
    # Its renderer still spins and gives no frame: the page is reopened, and the policy told.
    async with asyncio.timeout(30):
        shot = await session.screenshot(FRAME)
    assert shot.data()[:2] == b"\xff\xd8"
    assert session.pages_replaced == 1
    assert any("stopped responding" in e for e in session.drain_events())


class _BusyLinkPages(BaseHTTPRequestHandler):
    """Every page is a link to the next one whose click, once the navigation has started, keeps the
    old document's main thread busy for 1 s: a capture sent right after the click waits for a frame
    of that document while the next one commits."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        name = self.path.strip("/")
        n = int(name) if name.isdigit() else 0
        body = (
            f"<!doctype html><title>{n}</title><body style='margin:0'><a id=a href='/{n + 1}' "
            "style='display:block;width:100%;height:300px;background:#8c8'>next</a><script>"
            "document.getElementById('a').onclick = () => setTimeout(() => {"
            " const t = Date.now() + 1000; while (Date.now() < t) {} }, 0)</script>"
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Cache-Control", "no-store")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def busy_links() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _BusyLinkPages)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


async def test_a_capture_waiting_when_a_navigation_commits_is_sent_again(browser: Browser, busy_links: str) -> None:
    """Chromium never answers a capture whose document is replaced while it waits (docs/faults.md):
    without sending it again, most of these captures would wait out the 60 s deadline."""
    session = await BrowserSession.create(browser, BrowserConfig(capture_timeout_s=60.0))
    try:
        await session.goto(busy_links + "/0", start=True)
        n = 0
        while session.captures_resent == 0 and n < 12:  # until the race is run and lost by Chromium
            n += 1
            await session.screenshot(FRAME)
            cdp = await session._state.cdp_session()
            assert isinstance(cdp, DevToolsSession)
            await cdp.click(640, 100)  # no settle: the capture goes out while the navigation is on its way
            session._capture._settled_scroll = (0.0, 0.0)  # nor a round trip through the busy page before it
            async with asyncio.timeout(30):
                shot = await session.screenshot(FRAME)
            assert shot.data()[:2] == b"\xff\xd8"
            await session.page.wait_for_url(f"**/{n}", wait_until="load")
        assert session.captures_recovered == 0 and session.pages_replaced == 0
        assert session.captures_resent >= 1, n  # the race was run (and lost by Chromium) at least once
    finally:
        await session.close()


class _FramedPages(BaseHTTPRequestHandler):
    """``/framed``: a page whose ``javascript:`` iframe sends its parent to ``localhost`` at once;
    ``/redirect``: a redirect to ``localhost``."""

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        if self.path == "/redirect":  # the goto's own navigation, sent to localhost
            self.send_response(302)
            self.send_header("Location", f"http://localhost:{self.server.server_address[1]}/elsewhere")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = (
            b'<!doctype html><title>framed</title><h1>framed</h1><iframe src="javascript:parent.location='
            b"'http://localhost:'+parent.location.port+'/elsewhere'\"></iframe>"
            if self.path == "/framed"
            else b"<!doctype html><title>elsewhere</title>"
        )
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def framed() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FramedPages)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("mode", ["allow-list", "block-list", "navigations only"])
async def test_a_frame_sending_its_parent_to_a_refused_host_does_not_hold_up_goto(
    browser: Browser, framed: str, mode: str
) -> None:
    """Playwright's goto waited for a load event it never saw, its whole navigation timeout, after the
    guard refused the navigation a frame of the opened page asked of its parent."""
    if mode == "allow-list":
        policy = NavigationPolicy.build(allowed=["127.0.0.1"], start_url=framed)
    elif mode == "block-list":
        policy = NavigationPolicy.build(blocked=["localhost"], start_url=framed)
    else:  # the CDP interception of documents alone, as in the default SSRF mode
        policy = NavigationPolicy(blocked=parse_rules(["localhost"]), every_request=False)
    session = await BrowserSession.create(browser, BrowserConfig(navigation_timeout_s=20.0))
    try:
        await session.set_guard(NavigationGuard(policy))
        await session.goto(framed + "/framed", start=True)
        events = session.drain_events()
        assert session.url == framed + "/framed"
        assert [e for e in events if e.startswith("Blocked a navigation to http://localhost:")], events
        assert not [e for e in events if "still loading" in e], events  # the goto ended on the load
        assert await session.title() == "framed"
        # A refusal before the opened document commits (its own redirect) still fails the goto.
        with pytest.raises(ActionError, match=r"redirect was not opened|ERR_|cannot open"):
            await session.goto(framed + "/redirect")
        assert session.url == framed + "/framed"
    finally:
        await session.close()
