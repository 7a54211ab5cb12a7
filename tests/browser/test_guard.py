"""The navigation guard in a real Chromium: every way off the allowed site is refused and reported.

The safety test page (webagent/testing/safetysites.py) is opened on ``127.0.0.1``; its elements try
to reach ``localhost`` (the same server under another host name), which the allow-list refuses.
The server records every request it receives, so "not followed" means the blocked host got nothing.
"""

from __future__ import annotations

import asyncio
import gc
import io
import weakref
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from PIL import Image, ImageChops
from playwright.async_api import Browser, BrowserContext, Page, async_playwright

from webagent.browser.guard import _GATES, NavigationGuard
from webagent.browser.launcher import launch_browser
from webagent.browser.session import BrowserSession
from webagent.config import BrowserConfig
from webagent.errors import ActionError, NavigationError
from webagent.guard.navigation import NavigationPolicy
from webagent.images import ResizeRule, frame_for
from webagent.testing.safetysites import SAFETY_ELEMENTS
from webagent.testing.sites import SiteServer

pytestmark = pytest.mark.browser

SessionFactory = Callable[..., "asyncio.Future[BrowserSession]"]


def _point(name: str) -> tuple[float, float]:
    return 140.0, 60.0 + 50.0 * SAFETY_ELEMENTS.index(name)


@pytest.fixture(scope="module")
async def playwright_only(launch_options: dict[str, Any]) -> AsyncIterator[Browser]:
    """A Chromium without the direct DevTools connection: the guard works through Playwright
    (routes, the driven page's own CDP session)."""
    async with async_playwright() as playwright:
        chromium = await launch_browser(playwright, BrowserConfig(direct_cdp=False), options=launch_options)
        yield chromium
        await chromium.close()


@pytest.fixture
async def open_session(browser: Browser, site: SiteServer) -> AsyncIterator[Callable[..., object]]:
    sessions: list[BrowserSession] = []

    async def factory(**policy: object) -> BrowserSession:
        config = BrowserConfig(settle_timeout_s=3.0)
        guard = NavigationGuard(NavigationPolicy.build(start_url=site.url, **policy))  # type: ignore[arg-type]
        session = await BrowserSession.create(browser, config, guard=guard)
        sessions.append(session)
        await session.set_guard(guard)
        return session

    yield factory
    for session in sessions:
        await session.close()


def _blocked_host_hits(site: SiteServer) -> list[tuple[str, str]]:
    return [hit for hit in site.safety_hits if hit[0].startswith("localhost")]


@pytest.mark.parametrize(
    ("element", "event"),
    [
        ("direct", "Blocked a navigation to http://localhost:{port}/safety/target?via=link"),
        ("redirect", "Blocked a redirect to http://localhost:{port}/safety/target?via=redirect"),
        ("popup", "Blocked a new tab that was to open http://localhost:{port}/safety/target?via=popup"),
        ("open", "Blocked a new tab that was to open http://localhost:{port}/safety/target?via=open"),
        ("form", "Blocked a navigation to http://localhost:{port}/safety/target?via=form"),
        ("js", "Blocked a navigation to http://localhost:{port}/safety/target?via=js"),
        ("frame", "Blocked a frame on the page from loading http://localhost:{port}/safety/target?via=iframe"),
    ],
)
async def test_blocked_navigations_are_not_followed_and_are_reported(
    open_session: Callable[..., object], site: SiteServer, element: str, event: str
) -> None:
    session: BrowserSession = await open_session(allowed=["127.0.0.1"])  # type: ignore[misc]
    start = site.url + "/safety/"
    await session.goto(start, start=True)
    session.drain_events()
    site.safety_hits.clear()
    await session.click(*_point(element))
    await asyncio.sleep(0.3)  # anything late would still reach the server
    events = session.drain_events()
    assert any(e.startswith(event.format(port=site.port)) and "not in allowed_domains" in e for e in events), events
    assert not any("still loading" in e for e in events), events  # settle did not wait for a dead navigation
    assert session.url == start
    assert [p.url for p in session.context.pages] == [start]  # a blocked tab is closed again
    assert _blocked_host_hits(site) == []
    assert session.guard is not None and session.guard.blocked_navigations == 1


@pytest.mark.parametrize("element", ["image", "socket", "data"])
async def test_subresources_sockets_and_data_pages_are_refused_quietly(
    open_session: Callable[..., object], site: SiteServer, element: str
) -> None:
    session: BrowserSession = await open_session(allowed=["127.0.0.1"])  # type: ignore[misc]
    start = site.url + "/safety/"
    await session.goto(start, start=True)
    site.safety_hits.clear()
    await session.click(*_point(element))
    await asyncio.sleep(0.3)
    assert session.url == start and _blocked_host_hits(site) == []
    assert session.guard is not None
    # Chromium refuses data: pages itself; a WebSocket is refused by its network layer (the proxy net,
    # WebSocket rules), out of the guard's sight and count
    assert session.guard.blocked_requests == (1 if element == "image" else 0)
    assert session.drain_events() == []


@pytest.mark.parametrize("element", ["allowed", "allowed-redirect"])
async def test_allowed_navigations_and_redirects_go_through(
    open_session: Callable[..., object], site: SiteServer, element: str
) -> None:
    session: BrowserSession = await open_session(allowed=["127.0.0.1"])  # type: ignore[misc]
    await session.goto(site.url + "/safety/", start=True)
    await session.click(*_point(element))
    assert session.url == f"{site.url}/safety/target?via={element}"
    assert session.drain_events() == []


async def test_block_list_alone(open_session: Callable[..., object], site: SiteServer) -> None:
    session: BrowserSession = await open_session(blocked=["localhost"])  # type: ignore[misc]
    await session.goto(site.url + "/safety/", start=True)
    site.safety_hits.clear()
    await session.click(*_point("direct"))
    assert "blocked_domains entry localhost" in " ".join(session.drain_events())
    assert _blocked_host_hits(site) == []
    await session.click(*_point("allowed"))
    assert session.url.endswith("via=allowed")


async def test_goto_and_start_url_are_refused_before_any_request(
    open_session: Callable[..., object], site: SiteServer
) -> None:
    session: BrowserSession = await open_session(allowed=["127.0.0.1"])  # type: ignore[misc]
    other = f"http://localhost:{site.port}/safety/target?via=goto"
    site.safety_hits.clear()
    with pytest.raises(NavigationError, match="not in allowed_domains"):
        await session.goto(other, start=True)
    await session.goto(site.url + "/safety/", start=True)
    for url in (other, "javascript:location='http://localhost/'", "data:text/html,hi"):
        with pytest.raises(ActionError, match="was not opened"):
            await session.goto(url)
    assert _blocked_host_hits(site) == []


async def test_private_addresses_are_blocked_for_a_public_start(browser: Browser, site: SiteServer) -> None:
    # As if the run had started on a public site: the local test server is then off limits.
    guard = NavigationGuard(NavigationPolicy.build(start_url="https://example.com/"))
    session = await BrowserSession.create(browser, BrowserConfig(), guard=guard)
    try:
        await session.set_guard(guard)
        site.safety_hits.clear()
        with pytest.raises(NavigationError, match="private or local network address"):
            await session.goto(site.url + "/safety/", start=True)
        await session.page.set_content(f'<a href="{site.url}/safety/target?via=ssrf" style="font-size:80px">x</a>')
        await session.click(20, 40)
        assert "127.0.0.1 is a private or local network address" in " ".join(session.drain_events())
        assert site.safety_hits == []
    finally:
        await session.close()


async def test_no_interception_without_rules(open_session: Callable[..., object], site: SiteServer) -> None:
    session: BrowserSession = await open_session()  # type: ignore[misc]
    assert session.guard is not None and not session.guard.active
    await session.goto(site.url + "/safety/", start=True)
    await session.click(*_point("direct"))
    assert session.url.startswith(f"http://localhost:{site.port}/")


# -- secrets: a field holding one is masked ------------------------------------------------------


async def _typed_field(browser: Browser, site: SiteServer, text: str, *, mask: bool) -> tuple[bytes, str, str]:
    session = await BrowserSession.create(browser, BrowserConfig(screenshot_format="png"))
    try:
        await session.goto(site.url + "/safety/login", start=True)
        await session.write(560, 244, text, press_enter=False, mask=mask)
        await session.click(1000, 700)  # move the focus (and the caret) away
        value = await session.page.input_value("#code")
        style = await session.page.eval_on_selector("#code", "el => getComputedStyle(el).webkitTextSecurity")
        shot = await session.screenshot(frame_for(1280, 800, ResizeRule(1, 1, 10**9)))
        return shot.data(), value, str(style)
    finally:
        await session.close()


def _field(png: bytes) -> Image.Image:
    return Image.open(io.BytesIO(png)).convert("RGB").crop((400, 220, 720, 268))


async def test_a_masked_field_shows_the_same_discs_whatever_it_holds(browser: Browser, site: SiteServer) -> None:
    one, value_one, style = await _typed_field(browser, site, "s3cr3t-Pa55!#x", mask=True)
    two, value_two, _ = await _typed_field(browser, site, "QWERTY-zxcv$%7", mask=True)
    plain, _, plain_style = await _typed_field(browser, site, "s3cr3t-Pa55!#x", mask=False)
    assert (value_one, value_two, style, plain_style) == ("s3cr3t-Pa55!#x", "QWERTY-zxcv$%7", "disc", "none")
    assert ImageChops.difference(_field(one), _field(two)).getbbox() is None  # the pixels do not depend on the text
    assert ImageChops.difference(_field(one), _field(plain)).getbbox() is not None  # ... and unmasked they would


async def test_a_secret_is_not_typed_where_no_field_has_the_focus(browser: Browser, site: SiteServer) -> None:
    session = await BrowserSession.create(browser, BrowserConfig())
    try:
        await session.goto(site.url + "/safety/login", start=True)
        with pytest.raises(ActionError, match="secret was not typed"):
            await session.write(1100, 700, "s3cr3t-Pa55!#x", press_enter=False, mask=True)
    finally:
        await session.close()


@pytest.mark.parametrize(
    ("html", "event"),
    [
        ('<a href="{t}link" style="font-size:80px">x</a>', "Blocked a navigation to {t}link"),
        (
            '<form action="{t}form" method="post"><button style="font-size:80px">x</button></form>',
            "Blocked a navigation to {t}form",
        ),
        (
            '<a href="{t}popup" target="_blank" style="font-size:80px">x</a>',
            "Blocked a new tab that was to open {t}popup",
        ),
        (
            '<button onclick="window.open(\'{t}open\')" style="font-size:80px">x</button>',
            "Blocked a new tab that was to open {t}open",
        ),
        (
            "<button onclick=\"const f=document.createElement('iframe');f.src='{t}iframe';document.body.append(f)\" "
            'style="font-size:80px">x</button>',
            "Blocked a frame on the page from loading {t}iframe",
        ),
    ],
)
async def test_default_private_network_block_checks_navigations_without_routing(
    browser: Browser, site: SiteServer, html: str, event: str
) -> None:
    # A public start with no domain lists: navigation-only mode (no route, Chromium's cache kept).
    policy = NavigationPolicy.build(start_url="https://example.com/")
    assert policy.active and not policy.every_request
    session = await BrowserSession.create(browser, BrowserConfig(settle_timeout_s=2.0))
    try:
        guard = NavigationGuard(policy)
        await session.set_guard(guard)
        target = f"{site.url}/safety/target?via="
        site.safety_hits.clear()
        await session.page.set_content(html.format(t=target))
        await session.click(20, 40)
        events = " ".join(session.drain_events())
        if "iframe" in event:
            # settle waits for the main frame's navigations only: a frame's may be reported a moment
            # later (in the next step's events)
            for _ in range(40):
                if event.format(t=target) in events:
                    break
                await asyncio.sleep(0.05)
                events += " " + " ".join(session.drain_events())
        assert event.format(t=target) in events, events
        assert "is a private or local network address" in events
        assert not session.url.startswith(site.url)  # the agent never got there
        assert len(session.context.pages) == 1  # a refused tab is closed
        assert site.safety_hits == []  # stopped before any request was made, a new tab's too
    finally:
        await session.close()


async def _socket_reaches_other_host(page: Page, site: SiteServer) -> bool:
    """Click the WebSocket button; whether the handshake reached the other host name."""
    site.safety_hits.clear()
    await page.click("#socket")
    for _ in range(40):
        if _blocked_host_hits(site):
            return True
        await asyncio.sleep(0.05)
    return False


@pytest.mark.parametrize("direct", [True, False], ids=["devtools", "playwright"])
async def test_an_uninstalled_guard_lets_websockets_through(
    browser: Browser, playwright_only: Browser, site: SiteServer, direct: bool
) -> None:
    """A caller's context outlives its runs: it must not keep filtering with a finished run's policy,
    and a later run's guard on it holds again (over the direct connection, or Playwright's routes)."""
    context = await (browser if direct else playwright_only).new_context()
    try:
        page = await context.new_page()
        await page.goto(site.url + "/safety/")
        for _ in range(2):  # a run, then a later one on the same context
            session = BrowserSession(page, BrowserConfig())
            await session.set_guard(NavigationGuard(NavigationPolicy.build(start_url=site.url, allowed=["127.0.0.1"])))
            assert not await _socket_reaches_other_host(page, site)
            await session.close()
            assert await _socket_reaches_other_host(page, site)
        if not direct:  # one WebSocket route however many guards came and went (Playwright cannot remove one)
            assert len(context._impl_obj._web_socket_routes) == 1  # Playwright's own list of them
    finally:
        await context.close()


@pytest.mark.parametrize("direct", [True, False], ids=["devtools", "playwright"])
async def test_a_closed_guarded_context_is_not_kept_alive(
    browser: Browser, playwright_only: Browser, site: SiteServer, direct: bool
) -> None:
    # What the guard keeps of a context (the WebSocket gate, the target watcher's entries) is held
    # only as long as the context is (a guarded batch would otherwise keep every run's context).
    async def guarded_run() -> weakref.ref[BrowserContext]:
        guard = NavigationGuard(NavigationPolicy.build(start_url=site.url, allowed=["127.0.0.1"]))
        session = await BrowserSession.create(browser if direct else playwright_only, BrowserConfig(), guard=guard)
        await session.set_guard(guard)
        await session.goto(site.url + "/safety/")
        assert (session.context in _GATES) is not direct
        await session.close()
        return weakref.ref(session.context)

    context = await guarded_run()
    for _ in range(10):  # the driver lets go of a closed context's objects a moment later
        gc.collect()
        if context() is None:
            break
        await asyncio.sleep(0.1)
    assert context() is None


@pytest.mark.parametrize("direct", [True, False], ids=["devtools", "playwright"])
async def test_a_driver_that_lets_go_of_a_guarded_page_leaves_its_guard_in_force(
    browser: Browser, playwright_only: Browser, site: SiteServer, direct: bool
) -> None:
    """A pilot's driver (``Agent.page_driver``) on the page of a kept session sets and removes a guard
    of its own: the session's guard must hold on after it (the MCP server's kept sessions)."""
    policy = NavigationPolicy.build(start_url=site.url, allowed=["127.0.0.1"])
    guard = NavigationGuard(policy)
    session = await BrowserSession.create(browser if direct else playwright_only, BrowserConfig(), guard=guard)
    try:
        await session.set_guard(guard)
        await session.goto(site.url + "/safety/", start=True)
        driver = BrowserSession(session.page, BrowserConfig())
        await driver.set_guard(NavigationGuard(policy))
        await driver.close()
        site.safety_hits.clear()
        await session.click(*_point("direct"))
        assert any("not in allowed_domains" in e for e in session.drain_events())
        assert session.url == site.url + "/safety/" and _blocked_host_hits(site) == []
    finally:
        await session.close()
