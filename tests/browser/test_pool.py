"""The pool retires a browser that stops answering, and a cancelled session open leaks nothing.

The browsers here are fakes (a frozen Chromium cannot be made on demand without a signal to a
process of another test); real browser deaths are covered by tests/e2e/test_chaos_batch.py.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from playwright.async_api import Error as PlaywrightError

from webagent.browser.pool import OPENS_AT_ONCE, BrowserPool, _Slot
from webagent.config import BrowserConfig
from webagent.errors import BrowserError, BrowserStuckError

FAST = BrowserConfig(navigation_timeout_s=0.1, command_timeout_s=0.1)


class Context:
    def __init__(self, hang_new_page: bool) -> None:
        self.hang_new_page = hang_new_page
        self.closed = False

    async def new_page(self) -> Any:
        if self.hang_new_page:
            await asyncio.Event().wait()
        raise AssertionError("not reached in these tests")

    async def close(self) -> None:
        self.closed = True


class FakeBrowser:
    """Connected; ``new_context`` never answers (``frozen``) or answers a context whose tab hangs."""

    def __init__(self, frozen: bool) -> None:
        self.frozen = frozen
        self.calls = 0
        self.contexts: list[Context] = []
        self.closed = False
        self.opened = asyncio.Event()

    def is_connected(self) -> bool:
        return True

    def on(self, *_: Any) -> None:
        pass

    async def new_context(self, **_: Any) -> Context:
        self.calls += 1
        if self.frozen:
            await asyncio.Event().wait()
        self.contexts.append(Context(hang_new_page=True))
        self.opened.set()
        return self.contexts[-1]

    async def close(self) -> None:
        self.closed = True


def launching(pool: BrowserPool, monkeypatch: pytest.MonkeyPatch, browsers: list[FakeBrowser]) -> list[FakeBrowser]:
    """Replace the pool's launcher: it hands out ``browsers`` in order, then frozen ones; returns those launched."""
    launched: list[FakeBrowser] = []

    async def launch(*, hardened: bool = False) -> _Slot:
        launched.append(browsers[len(launched)] if len(launched) < len(browsers) else FakeBrowser(frozen=True))
        return pool._watch(_Slot(launched[-1], owned=True, hardened=hardened))  # type: ignore[arg-type]

    monkeypatch.setattr(pool, "_launch", launch)
    return launched


async def test_a_browser_that_does_not_answer_is_retired_and_the_session_goes_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    frozen, hanging_tab, frozen_too = FakeBrowser(frozen=True), FakeBrowser(frozen=False), FakeBrowser(frozen=True)
    pool = BrowserPool(FAST, browser=frozen)  # type: ignore[arg-type]
    launched = launching(pool, monkeypatch, [hanging_tab, frozen_too])
    with pytest.raises(BrowserStuckError, match="cannot open a browser context: new_context: no answer"):
        async with pool.session():
            pass
    assert launched == [hanging_tab, frozen_too]  # each stuck browser left for a new one, SESSION_TRIES in all
    assert frozen.calls == hanging_tab.calls == frozen_too.calls == 1
    assert hanging_tab.contexts[0].closed  # the context of the tab that never came is not left behind
    assert hanging_tab.closed  # retired with no session on it: closed
    assert pool.stuck == 3 and pool.browsers == 0 and pool.crashes == 0


async def test_a_cancelled_session_open_closes_its_context() -> None:
    browser = FakeBrowser(frozen=False)
    pool = BrowserPool(BrowserConfig(navigation_timeout_s=30, command_timeout_s=30), browser=browser)  # type: ignore[arg-type]

    async def open_session() -> None:
        async with pool.session():
            pass

    task = asyncio.create_task(open_session())
    await browser.opened.wait()
    await asyncio.sleep(0.05)  # now waiting for new_page
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert [c.closed for c in browser.contexts] == [True]


async def test_an_ordinary_open_failure_does_not_retire_the_browser() -> None:
    class Refusing(FakeBrowser):
        async def new_context(self, **_: Any) -> Context:
            from playwright.async_api import Error

            raise Error("Browser.newContext: something the site asked for is not supported")

    browser = Refusing(frozen=False)
    pool = BrowserPool(FAST, browser=browser)  # type: ignore[arg-type]
    pool.disconnect_wait_s = 0.01
    with pytest.raises(BrowserError) as caught:
        async with pool.session():
            pass
    assert not isinstance(caught.value, BrowserStuckError)
    assert pool.browsers == 1 and pool.stuck == 0


async def test_a_browser_opens_a_few_sessions_at_a_time() -> None:
    class Counting(FakeBrowser):
        def __init__(self) -> None:
            super().__init__(frozen=False)
            self.in_flight = self.peak = 0

        async def new_context(self, **_: Any) -> Context:
            self.calls += 1
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
            await asyncio.sleep(0.01)
            self.in_flight -= 1
            raise PlaywrightError("Browser.newContext: refused by this test")

    browser = Counting()
    pool = BrowserPool(BrowserConfig(), browser=browser)  # type: ignore[arg-type]
    pool.disconnect_wait_s = 0.01

    async def open_one() -> None:
        with pytest.raises(BrowserError, match="refused by this test"):
            async with pool.session():
                pass

    seen: list[int] = []

    async def watch() -> None:
        while True:
            seen.append(pool.waiting_to_open)
            await asyncio.sleep(0)

    watcher = asyncio.create_task(watch())
    await asyncio.gather(*(open_one() for _ in range(3 * OPENS_AT_ONCE)))
    watcher.cancel()
    assert browser.peak == OPENS_AT_ONCE  # the others waited their turn
    assert max(seen) == 2 * OPENS_AT_ONCE  # counted while they waited (admission reads it) ...
    assert pool.waiting_to_open == 0  # ... and no longer once their turn came, failed opens included


async def test_a_session_cancelled_while_it_waits_its_turn_is_not_counted_as_waiting() -> None:
    browser = FakeBrowser(frozen=True)
    pool = BrowserPool(BrowserConfig(), browser=browser)  # type: ignore[arg-type]
    opens = [asyncio.create_task(_open(pool)) for _ in range(OPENS_AT_ONCE + 3)]
    async with asyncio.timeout(10):
        while browser.calls < OPENS_AT_ONCE or pool.waiting_to_open < 3:  # noqa: ASYNC110 (counters, polled)
            await asyncio.sleep(0)
    assert pool.waiting_to_open == 3
    for task in opens:
        task.cancel()
    await asyncio.gather(*opens, return_exceptions=True)
    assert pool.waiting_to_open == 0


async def test_sessions_waiting_on_a_browser_that_is_retired_go_to_another(monkeypatch: pytest.MonkeyPatch) -> None:
    frozen, fresh = FakeBrowser(frozen=True), FakeBrowser(frozen=False)
    pool = BrowserPool(FAST, browser=frozen)  # type: ignore[arg-type]
    launched = launching(pool, monkeypatch, [fresh])
    results = await asyncio.gather(*(_open(pool) for _ in range(OPENS_AT_ONCE + 4)), return_exceptions=True)
    assert frozen.calls == OPENS_AT_ONCE  # the 4 that waited their turn never asked it: they went on
    assert fresh.calls == OPENS_AT_ONCE and launched[0] is fresh  # 4 of 12 waited their turn there too
    assert all(isinstance(r, BrowserStuckError) for r in results), results  # every browser here is stuck
    assert pool.stuck == len(launched) + 1


async def _open(pool: BrowserPool) -> None:
    async with pool.session():
        pass
