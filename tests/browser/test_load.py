"""Deadlines that scale with the load they measure: a command past its deadline on a saturated machine
(others answered, slowly) gets more time; one that nothing suggests will come (nothing answers, its
own browser answers nothing, or the others answer fast) fails at its deadline as before.

``BrowserLoad`` is tested with a fake clock; ``within`` and the direct DevTools connection (against
the fake DevTools endpoint of test_devtools) with short real deadlines, asserting outcomes only.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator

import pytest

from webagent.browser.deadline import CommandTimeout, browser_load, session_browser, within
from webagent.browser.devtools import DevTools
from webagent.browser.load import BUSY_USE, MAX_SCALE, BrowserLoad

from .test_devtools import FakeBrowser, closed_fully, with_session


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_no_answer_yet_means_nothing_is_known_and_the_deadline_stands() -> None:
    load = BrowserLoad(Clock())
    assert load.use() is None and load.latency() is None and not load.busy
    assert load.grace(load.now() - 10, 10.0) == 0.0


def test_answers_measure_the_deadline_use_of_a_recent_window() -> None:
    clock = Clock()
    load = BrowserLoad(clock, window_s=10.0)
    for _ in range(9):
        load.answer(0.1, 10.0)  # 1 % of the deadline
    load.answer(5.0, 10.0)  # 50 %
    assert load.use(0.5) == pytest.approx(0.01) and load.use(1.0) == pytest.approx(0.5)
    assert load.latency(1.0) == pytest.approx(5.0) and load.answered == 10
    clock.t += 11  # out of the window
    assert load.use() is None
    load.expire(12.0, 10.0)  # a command given up counts as a use past 1
    assert load.use() == pytest.approx(1.2) and load.expired == 1


def saturated(clock: Clock) -> BrowserLoad:
    """Commands answered at half their deadlines, the last one just now."""
    load = BrowserLoad(clock)
    for _ in range(20):
        load.answer(5.0, 10.0)
    assert load.busy and load.use() == pytest.approx(0.5) and BUSY_USE <= 0.5
    return load


def test_on_a_saturated_machine_a_command_past_its_deadline_gets_more_time_up_to_a_bound() -> None:
    clock = Clock()
    load = saturated(clock)
    started = clock.t - 10.0  # its 10 s deadline passed just now
    assert load.grace(started, 10.0) == 5.0  # looked at again after half a deadline
    assert load.grace(started, 10.0, browser_answered=True) == 5.0
    clock.t = started + MAX_SCALE * 10.0 - 2.0
    load.answer(5.0, 10.0)  # still answering
    assert load.grace(started, 10.0) == 2.0  # never past MAX_SCALE deadlines in all
    clock.t = started + MAX_SCALE * 10.0
    assert load.grace(started, 10.0) == 0.0
    assert load.extended == 3


def test_a_stuck_browser_is_not_given_more_time() -> None:
    clock = Clock()
    load = saturated(clock)
    started = clock.t
    clock.t += 10.0
    assert load.grace(started, 10.0, browser_answered=False) == 0.0  # its own browser answered nothing since
    clock.t += 0.5  # nothing answered anywhere for more than a deadline: every browser is stuck
    assert load.grace(started, 10.0) == 0.0


def test_a_command_lost_while_the_others_answer_quickly_is_not_given_more_time() -> None:
    clock = Clock()
    load = BrowserLoad(clock)
    for _ in range(20):
        load.answer(0.2, 10.0)
    assert load.grace(clock.t - 10.0, 10.0, browser_answered=True) == 0.0


# -- within ------------------------------------------------------------------------------------------
@contextlib.contextmanager
def measured(load: BrowserLoad) -> Iterator[BrowserLoad]:
    token = browser_load.set(load)
    try:
        yield load
    finally:
        browser_load.reset(token)


async def keep_answering(load: BrowserLoad, latency_s: float, deadline_s: float) -> None:
    """Other sessions' commands, answered all along at ``latency_s`` of ``deadline_s``."""
    while True:
        load.answer(latency_s, deadline_s)
        await asyncio.sleep(0.02)


@contextlib.asynccontextmanager
async def others(load: BrowserLoad, latency_s: float, deadline_s: float) -> AsyncIterator[None]:
    feeder = asyncio.create_task(keep_answering(load, latency_s, deadline_s))
    try:
        yield
    finally:
        feeder.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await feeder


async def answer_after(seconds: float) -> str:
    await asyncio.sleep(seconds)
    return "answered"


async def test_within_waits_longer_for_a_slow_command_on_a_saturated_machine() -> None:
    load = BrowserLoad()
    with measured(load):
        async with others(load, 0.5, 1.0):
            assert await within(answer_after(1.6), 0.5, "slow") == "answered"
    assert load.extended >= 1 and load.expired == 0


async def test_within_keeps_its_deadline_where_the_others_answer_quickly() -> None:
    load = BrowserLoad()
    with measured(load):
        async with others(load, 0.01, 1.0):
            with pytest.raises(CommandTimeout, match=r"^lost: no answer from the browser within 0\.5 s$"):
                await within(asyncio.Event().wait(), 0.5, "lost")
    assert load.extended == 0 and load.expired == 1


async def test_within_keeps_its_deadline_where_nothing_answers() -> None:
    load = BrowserLoad()
    for _ in range(20):
        load.answer(0.5, 1.0)  # saturated a moment ago, then nothing more
    with measured(load), pytest.raises(CommandTimeout):
        await within(asyncio.Event().wait(), 0.5, "stuck")


async def test_within_gives_up_after_max_scale_deadlines_even_on_a_saturated_machine() -> None:
    load = BrowserLoad()
    with measured(load):
        async with others(load, 0.5, 1.0):
            with pytest.raises(CommandTimeout, match=r"stuck: no answer from the browser within 0\.3 s \(waited"):
                await within(asyncio.Event().wait(), 0.3, "stuck")
    assert load.extended >= 1


class Browser:
    """A browser's answers so far (what the pool tells a run through ``session_browser``)."""

    def __init__(self) -> None:
        self.replies = 0


async def test_within_keeps_its_deadline_when_the_session_s_own_browser_answers_nothing() -> None:
    """A frozen browser on a saturated machine: the others answer, slowly, but not the one this
    command waits on (a Playwright call, whose browser the pool named for the run)."""
    load, frozen = BrowserLoad(), Browser()
    token = session_browser.set(frozen)
    try:
        with measured(load):
            async with others(load, 0.5, 1.0):
                with pytest.raises(CommandTimeout, match=r"^frozen: no answer from the browser within 0\.5 s$"):
                    await within(asyncio.Event().wait(), 0.5, "frozen")
    finally:
        session_browser.reset(token)
    assert load.extended == 0


async def test_within_waits_longer_while_the_session_s_own_browser_still_answers() -> None:
    load, alive = BrowserLoad(), Browser()

    async def answering() -> None:
        while True:
            alive.replies += 1
            await asyncio.sleep(0.02)

    token = session_browser.set(alive)
    try:
        with measured(load):
            async with running(answering()), others(load, 0.5, 1.0):
                assert await within(answer_after(1.6), 0.5, "slow") == "answered"
    finally:
        session_browser.reset(token)
    assert load.extended >= 1


# -- the direct DevTools connection ---------------------------------------------------------------
@pytest.fixture
async def fake() -> AsyncIterator[FakeBrowser]:
    server = FakeBrowser()
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
async def connection(fake: FakeBrowser) -> AsyncIterator[DevTools]:
    connected = await DevTools.connect("127.0.0.1", fake.port)
    yield connected
    connected.close()
    await closed_fully(connected)


async def browser(fake: FakeBrowser, *, answer_capture_after: float | None) -> None:
    """The fake browser: answers every command at once, a screenshot after ``answer_capture_after``
    (None: never)."""

    async def later(command: dict[str, object], seconds: float) -> None:
        await asyncio.sleep(seconds)
        await fake.send({"id": command["id"], "result": {"data": "shot"}, "sessionId": command.get("sessionId")})

    late: set[asyncio.Task[None]] = set()
    try:
        while True:
            command = await fake.commands.get()
            if command["method"] != "Page.captureScreenshot":
                await fake.send({"id": command["id"], "result": {}, "sessionId": command.get("sessionId")})
            elif answer_capture_after is not None:
                late.add(asyncio.create_task(later(command, answer_capture_after)))
    finally:
        for task in late:
            task.cancel()


async def other_sessions(connection: DevTools) -> None:
    """Another session's commands on the same browser, every 20 ms."""
    other = with_session(connection, "other")
    while True:
        with contextlib.suppress(Exception):
            await other.send("Runtime.evaluate", {"expression": "1"}, timeout_s=5.0)
        await asyncio.sleep(0.02)


@contextlib.asynccontextmanager
async def running(*coroutines: object) -> AsyncIterator[None]:
    tasks = [asyncio.ensure_future(c) for c in coroutines]  # type: ignore[call-overload]
    try:
        yield
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def test_a_slow_screenshot_on_a_saturated_machine_is_waited_for(connection: DevTools, fake: FakeBrowser) -> None:
    load = BrowserLoad()
    session = with_session(connection)
    with measured(load):
        async with running(browser(fake, answer_capture_after=1.2), other_sessions(connection)), others(load, 0.5, 1.0):
            reply = await session.send("Page.captureScreenshot", timeout_s=0.4)
    assert reply == {"data": "shot"} and load.extended >= 1


async def test_a_screenshot_from_a_browser_that_answers_nothing_fails_at_its_deadline(
    connection: DevTools, fake: FakeBrowser
) -> None:
    """A frozen browser (SIGSTOP): the machine may look saturated, but this browser has answered
    nothing since the screenshot was sent, so the recovery is not put off."""
    load = BrowserLoad()
    session = with_session(connection)
    with measured(load):
        async with others(load, 0.5, 1.0):  # other browsers answer, slowly; this one reads nothing
            with pytest.raises(
                CommandTimeout, match=r"^Page\.captureScreenshot: no answer from the browser within 0\.4 s$"
            ):
                await session.send("Page.captureScreenshot", timeout_s=0.4)
    assert load.extended == 0 and load.expired == 1 and not connection._pending


async def test_a_lost_screenshot_while_the_browser_answers_quickly_fails_at_its_deadline(
    connection: DevTools, fake: FakeBrowser
) -> None:
    load = BrowserLoad()
    session = with_session(connection)
    with measured(load):
        async with running(browser(fake, answer_capture_after=None), other_sessions(connection)):
            with pytest.raises(CommandTimeout, match=r"within 0\.4 s$"):
                await session.send("Page.captureScreenshot", timeout_s=0.4)
    assert load.extended == 0 and load.answered > 0  # the other session's quick answers were measured
