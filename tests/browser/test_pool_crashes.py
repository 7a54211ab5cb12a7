"""The browser pool replaces a dead browser (fakes: no Chromium)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from webagent.browser.pool import LAUNCH_TRIES, BrowserPool
from webagent.config import BrowserConfig
from webagent.errors import BrowserError


class FakeBrowser:
    def __init__(self, number: int) -> None:
        self.number = number
        self.connected = True
        self.closed = False
        self._handlers: list[Callable[[Any], None]] = []

    def on(self, event: str, handler: Callable[[Any], None]) -> None:
        assert event == "disconnected"
        self._handlers.append(handler)

    def is_connected(self) -> bool:
        return self.connected

    def die(self) -> None:
        if self.connected:
            self.connected = False
            for handler in list(self._handlers):
                handler(self)

    async def close(self) -> None:
        self.closed = True
        self.die()


class FakeContextSession:
    def __init__(self, browser: FakeBrowser) -> None:
        self.browser = browser
        self.closed = False
        self.browser_stuck = False

    async def close(self) -> None:
        self.closed = True


class FakeLauncher:
    """Stands in for Playwright and ``open_browser``; ``fail_launches`` launches fail first."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.browsers: list[FakeBrowser] = []
        self.fail_launches = 0
        self.unusable: set[int] = set()  # browsers on which a context cannot be opened
        self.late_disconnect_s: float | None = None  # ... because they die, reported this much later
        self.hangs: set[int] = set()  # browsers on which opening never answers (killed under the call)

        class FakePlaywright:
            async def stop(self) -> None:
                pass

        class Starter:
            async def start(self) -> FakePlaywright:
                return FakePlaywright()

        monkeypatch.setattr("webagent.browser.pool.async_playwright", lambda: Starter())
        monkeypatch.setattr("webagent.browser.pool.open_browser", self.open_browser)
        monkeypatch.setattr("webagent.browser.pool.BrowserSession.create", self.create)

    async def open_browser(self, playwright: Any, config: BrowserConfig, **_: Any) -> FakeBrowser:
        if self.fail_launches:
            self.fail_launches -= 1
            raise BrowserError("cannot launch Chromium: Failed to launch the browser process")
        browser = FakeBrowser(len(self.browsers) + 1)
        self.browsers.append(browser)
        return browser

    async def create(self, browser: FakeBrowser, config: BrowserConfig, **_: Any) -> FakeContextSession:
        if browser.number in self.hangs:
            asyncio.get_running_loop().call_later(0.05, browser.die)
            await asyncio.Event().wait()  # no answer, ever (its deadline is a minute away)
        if browser.number in self.unusable or not browser.connected:
            if self.late_disconnect_s is not None:
                asyncio.get_running_loop().call_later(self.late_disconnect_s, browser.die)
            raise BrowserError("cannot open a browser context: Target page, context or browser has been closed")
        return FakeContextSession(browser)


async def test_pool_replaces_a_dead_browser_and_never_hands_it_out(monkeypatch: pytest.MonkeyPatch) -> None:
    launcher = FakeLauncher(monkeypatch)
    pool = BrowserPool(BrowserConfig())
    await pool.start()
    async with pool.session() as first:
        assert first.browser.number == 1  # type: ignore[attr-defined]
        launcher.browsers[0].die()
        async with pool.session() as second:
            assert second.browser.number == 2  # type: ignore[attr-defined]
        assert pool.crashes == 1 and pool.browsers == 1
    assert launcher.browsers[0].closed  # the dead one is closed (and dropped) once its last session ended
    async with pool.session() as third:
        assert third.browser.number == 2  # type: ignore[attr-defined]
    launcher.browsers[1].die()
    async with pool.session() as fourth:  # a replacement that dies is replaced again
        assert fourth.browser.number == 3  # type: ignore[attr-defined]
    await pool.aclose()
    assert pool.crashes == 2 and pool.launched == 3


async def test_pool_waits_for_a_disconnect_reported_late(monkeypatch: pytest.MonkeyPatch) -> None:
    """A context that cannot be opened on a browser that is dying (the driver has not said so yet) is
    opened on a replacement, not reported as the task's error."""
    launcher = FakeLauncher(monkeypatch)
    pool = BrowserPool(BrowserConfig())
    await pool.start()
    launcher.unusable.add(1)
    launcher.late_disconnect_s = 0.05
    async with pool.session() as session:
        assert session.browser.number == 2  # type: ignore[attr-defined]
    assert pool.crashes == 1
    await pool.aclose()


async def test_an_open_pending_on_a_browser_that_dies_moves_on_at_its_disconnect(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A host killed while a session opens on it: the open is given up when the browser disconnects,
    and the session opens on a replacement, without waiting out the call's own deadline."""
    launcher = FakeLauncher(monkeypatch)
    pool = BrowserPool(BrowserConfig())
    await pool.start()
    launcher.hangs.add(1)

    async def open_one() -> int:
        async with pool.session() as session:
            return int(session.browser.number)  # type: ignore[attr-defined]

    assert await asyncio.wait_for(open_one(), 10) == 2
    assert pool.crashes == 1
    await pool.aclose()


async def test_pool_raises_a_session_error_of_a_live_browser(monkeypatch: pytest.MonkeyPatch) -> None:
    launcher = FakeLauncher(monkeypatch)
    pool = BrowserPool(BrowserConfig())
    pool.disconnect_wait_s = 0.05
    await pool.start()
    launcher.unusable.add(1)  # it stays connected: not a crash, the error stands
    with pytest.raises(BrowserError, match="cannot open a browser context"):
        async with pool.session():
            pass
    assert pool.crashes == 0 and len(launcher.browsers) == 1
    await pool.aclose()


async def test_pool_retries_the_launch_of_a_replacement(monkeypatch: pytest.MonkeyPatch) -> None:
    launcher = FakeLauncher(monkeypatch)
    monkeypatch.setattr("webagent.browser.pool._LAUNCH_RETRY_S", 0.01)
    launcher.fail_launches = 1
    pool = BrowserPool(BrowserConfig())
    with pytest.raises(BrowserError, match="cannot launch"):  # the first launch: one error up front
        await pool.start()
    await pool.start()
    launcher.browsers[0].die()
    assert LAUNCH_TRIES > 1
    launcher.fail_launches = LAUNCH_TRIES - 1  # a replacement launch is tried again
    async with pool.session() as session:
        assert session.browser.number == 2  # type: ignore[attr-defined]
    launcher.browsers[1].die()
    launcher.fail_launches = LAUNCH_TRIES
    with pytest.raises(BrowserError, match="cannot launch"):
        async with pool.session():
            pass
    await pool.aclose()
