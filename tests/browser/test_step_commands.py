"""The DevTools commands of one agent step, counted on the session's direct connection (a counting
hook on ``DevTools.request``, a real Chromium): what a step costs the browser's UI thread, as a
count that does not depend on the machine's load. ``benchmarks/throughput.py`` prints the same
counts per step for a whole batch (agent and floor side by side)."""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import pytest
from playwright.async_api import Browser

from webagent.browser.devtools import DevTools, DevToolsSession
from webagent.browser.session import BrowserSession
from webagent.config import PROFILES, BrowserConfig
from webagent.images import Frame, frame_for

PAGE = (
    "data:text/html,<title>0</title><body style='margin:0;height:3000px'>"
    "<button style='width:400px;height:300px' onclick='document.title = String(+document.title + 1)'>count</button>"
    "<a href='#second' style='display:block;margin-top:20px'>second</a></body>"
)
FRAME = frame_for(1280, 800, PROFILES["holo1.5"])


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Every command sent on a direct DevTools connection from now on, by method."""
    counts: Counter[str] = Counter()
    original = DevTools.request

    def request(self: DevTools, method: str, *args: Any, **kwargs: Any) -> Any:
        counts[method] += 1
        return original(self, method, *args, **kwargs)

    monkeypatch.setattr(DevTools, "request", request)
    return counts


@pytest.fixture
async def session(browser: Browser) -> AsyncIterator[BrowserSession]:
    session = await BrowserSession.create(browser, BrowserConfig())
    try:
        await session.goto(PAGE, start=True)
        await session.screenshot(FRAME)  # the first observation: the session's setup is done
        assert isinstance(session._state.cdp, DevToolsSession)
        yield session
    finally:
        await session.close()


@pytest.mark.browser
async def test_a_click_step_is_three_input_events_one_page_read_and_one_screenshot(
    session: BrowserSession, sent: Counter[str]
) -> None:
    await session.click(100, 100)
    await session.screenshot(FRAME)
    assert sent == {"Input.dispatchMouseEvent": 3, "Runtime.evaluate": 1, "Page.captureScreenshot": 1}
    assert await session.title() == "1"  # the click was handled


@pytest.mark.browser
async def test_steps_in_a_row_cost_the_same(session: BrowserSession, sent: Counter[str]) -> None:
    for _ in range(5):
        await session.click(100, 100)
        await session.screenshot(FRAME)
    assert sent == {"Input.dispatchMouseEvent": 15, "Runtime.evaluate": 5, "Page.captureScreenshot": 5}


@pytest.mark.browser
async def test_scrolling_and_keys_are_read_by_settle_and_the_screenshot_reads_nothing_more(
    session: BrowserSession, sent: Counter[str]
) -> None:
    await session.scroll("down")  # the wheel and the keys go over Playwright's driver
    await session.press("Tab")
    await session.screenshot(FRAME)
    # one settle read each (the last one gives the screenshot its scroll offsets), none of its own
    assert sent == {"Runtime.evaluate": 2, "Page.captureScreenshot": 1}


@pytest.mark.browser
async def test_after_a_navigation_or_going_back_the_screenshot_reads_the_view_first(
    session: BrowserSession, sent: Counter[str]
) -> None:
    await session.goto(PAGE + "<p>2</p>")  # over Playwright: no DevTools command of the session's
    await session.screenshot(FRAME)
    assert sent == {"Runtime.evaluate": 1, "Page.captureScreenshot": 1}
    sent.clear()
    await session.go_back()
    await session.screenshot(FRAME)
    assert sent == {"Page.getNavigationHistory": 1, "Runtime.evaluate": 1, "Page.captureScreenshot": 1}


@pytest.mark.browser
@pytest.mark.parametrize("shot", [FRAME, frame_for(1280, 800, None)], ids=["resized", "native"])
async def test_the_first_observation_hides_the_caret_in_its_own_view_read(
    browser: Browser, sent: Counter[str], shot: Frame
) -> None:
    session = await BrowserSession.create(browser, BrowserConfig())
    try:
        await session.goto(PAGE, start=True)
        await session.screenshot(shot)
        # the current document's caret hidden in the screenshot's view read, not a Runtime.evaluate of its own
        assert sent["Runtime.evaluate"] == 1 and sent["Page.captureScreenshot"] == 1, sent
        assert await session._state.page.evaluate("!!document[Symbol.for('webagent.caret')]")
    finally:
        await session.close()
