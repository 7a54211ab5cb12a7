"""Admission control with a fake clock: AIMD on the browsers' measured deadline use, between a floor
of one session and the ``--concurrency`` ceiling; and its gate, first come first served."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from webagent.batch import BatchStats
from webagent.batch.admission import (
    BETA,
    COOLDOWN_S,
    HIGH_USE,
    INITIAL,
    LOW_USE,
    OPEN_QUEUE,
    SETTLE_S,
    WINDOW_S,
    Admission,
)
from webagent.batch.cli import BatchProgress
from webagent.batch.summary import summarize
from webagent.browser.load import BrowserLoad
from webagent.config import AgentConfig

from .test_summary import render


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


class Machine:
    """A fake clock, the load it measures, and an admission reading it."""

    def __init__(self, ceiling: int, **options: int) -> None:
        self.clock = Clock()
        self.load = BrowserLoad(self.clock)
        self.admission = Admission(ceiling, self.load, clock=self.clock, **options)

    def answers(self, use: float, n: int = 20) -> None:
        """``n`` commands answered just now, each at ``use`` of its deadline."""
        for _ in range(n):
            self.load.answer(use * 10.0, 10.0)

    def later(
        self, seconds: float, use: float | None, *, running: int | None = None, waiting: int = 0, opening: int = 0
    ) -> int:
        """``seconds`` on; commands answered at ``use`` (None: none); the limit reconsidered with
        ``running`` sessions (default: as many as allowed), ``waiting`` tasks and ``opening`` of
        the running ones waiting for their turn to open. The limit then."""
        self.clock.t += seconds
        if use is not None:
            self.answers(use)
        a = self.admission
        a.running = a.allowed if running is None else running
        a.waiting = waiting
        a.update(opening)
        return a.allowed


def test_it_starts_at_initial_between_floor_and_ceiling() -> None:
    assert Machine(500).admission.allowed == INITIAL
    assert Machine(4).admission.allowed == 4
    assert Machine(500, initial=0).admission.allowed == 1  # never under the floor
    with pytest.raises(ValueError, match="floor"):
        Admission(0, BrowserLoad())


def test_slow_start_doubles_while_the_browsers_keep_up_once_per_settle_period_up_to_the_ceiling() -> None:
    m = Machine(100)
    low = LOW_USE / 2
    assert m.later(SETTLE_S, low, waiting=50) == 2 * INITIAL
    assert m.later(SETTLE_S / 4, low, waiting=50) == 2 * INITIAL  # too soon: the new sessions are not measured yet
    assert m.later(SETTLE_S, low, waiting=50) == 4 * INITIAL
    assert m.later(SETTLE_S, low, waiting=50) == 100  # the ceiling, not 128
    assert m.later(SETTLE_S, low, waiting=50) == 100
    assert "more sessions" in m.admission.reason or "of their deadlines" in m.admission.reason


def test_the_limit_grows_only_when_it_is_what_holds_tasks_back() -> None:
    m = Machine(100)
    assert m.later(SETTLE_S, 0.01, waiting=0) == INITIAL  # no task waits
    assert m.later(SETTLE_S, 0.01, running=3, waiting=5) == INITIAL  # fewer run than allowed
    assert m.later(WINDOW_S + 0.1, None, waiting=5) == INITIAL  # nothing answered lately: nothing to go by


def test_rising_latency_cuts_the_limit_to_a_share_of_the_sessions_running_then_growth_is_additive() -> None:
    m = Machine(500)
    for _ in range(4):
        m.later(SETTLE_S, 0.01, waiting=400)
    assert m.admission.allowed == 256
    high = HIGH_USE * 2
    assert m.later(WINDOW_S, high, running=200, waiting=300) == int(200 * BETA)  # fewer than were running
    assert m.admission.decreases == 1 and "fewer sessions" in m.admission.reason
    assert m.later(1.0, high, running=140, waiting=300) == 140  # within the cool-down: one cut per episode
    assert m.later(COOLDOWN_S, high, running=140, waiting=300) == int(140 * BETA)
    assert m.later(WINDOW_S + SETTLE_S, 0.01, waiting=300) == 98 + 9  # additive now: a tenth more
    assert m.later(SETTLE_S, (LOW_USE + HIGH_USE) / 2, waiting=300) == 107  # between the marks: it holds
    assert "holding" in m.admission.reason
    assert m.admission.lowest == INITIAL and m.admission.highest == 256


def test_no_cut_while_more_run_than_the_limit_already_and_never_under_the_floor() -> None:
    m = Machine(500)
    high = HIGH_USE * 2
    assert m.later(COOLDOWN_S, high, running=10, waiting=5) == 7
    assert m.later(COOLDOWN_S, high, running=30, waiting=5) == 7  # the running sessions are never stopped
    assert "draining" in m.admission.reason
    for _ in range(10):
        m.later(COOLDOWN_S, high, running=m.admission.allowed, waiting=5)
    assert m.admission.allowed == 1  # the floor: the batch always makes progress


def test_sessions_waiting_to_open_hold_the_limit_then_bring_it_down_to_what_the_browsers_open() -> None:
    m = Machine(500)
    low = LOW_USE / 2  # the commands answered quickly: by deadline use alone the limit would grow
    assert m.later(SETTLE_S, low, waiting=400) == 2 * INITIAL
    assert m.later(SETTLE_S, low, waiting=400, opening=OPEN_QUEUE) == 4 * INITIAL  # a short queue: fine
    assert m.later(SETTLE_S, low, waiting=400, opening=OPEN_QUEUE + 1) == 4 * INITIAL  # a longer one: it holds
    assert "9 sessions waiting for their turn to open: holding" in m.admission.reason
    assert m.later(SETTLE_S, low, waiting=400, opening=40) == 4 * INITIAL  # not at once: it may be a moment's
    assert m.admission.decreases == 0
    assert m.later(COOLDOWN_S, low, waiting=400, opening=40) == 64 - 40 + OPEN_QUEUE  # it lasted: open + the queue
    assert m.admission.decreases == 1 and "fewer sessions" in m.admission.reason
    # the queue drains as the browsers open the sessions: growth again, a tenth at a time
    assert m.later(SETTLE_S, low, running=64, waiting=400, opening=30) == 32  # still long: holding
    assert m.later(SETTLE_S, low, running=32, waiting=400, opening=2) == 35
    assert m.later(SETTLE_S, low, running=35, waiting=400, opening=0) == 38
    assert m.admission.lowest == INITIAL and m.admission.highest == 64


def test_a_queue_to_open_never_takes_the_limit_under_the_floor() -> None:
    m = Machine(500, floor=2)
    assert m.later(COOLDOWN_S, 0.01, running=16, waiting=10, opening=16) == 16
    assert m.later(COOLDOWN_S, 0.01, running=16, waiting=10, opening=16) == 8  # 0 open + OPEN_QUEUE
    m2 = Machine(500, floor=12)
    m2.later(COOLDOWN_S, 0.01, running=16, waiting=10, opening=16)
    assert m2.later(COOLDOWN_S, 0.01, running=16, waiting=10, opening=16) == 12
    assert m2.admission.limit == 12  # the limit itself, not only what is allowed of it


def test_the_queue_must_last_and_growth_waits_until_it_has_drained() -> None:
    m = Machine(500)
    m.later(SETTLE_S, LOW_USE / 2, waiting=100)  # 32
    assert m.later(1.0, 0.01, waiting=100, opening=20) == 32  # holding
    assert m.later(1.0, 0.01, waiting=100, opening=OPEN_QUEUE) == 32  # drained a moment ago: no growth yet
    assert m.later(1.0, 0.01, waiting=100, opening=20) == 32  # a new queue: its own clock
    assert m.later(COOLDOWN_S - 1.0, 0.01, waiting=100, opening=20) == 32 and m.admission.decreases == 0
    assert m.later(1.0, 0.01, waiting=100, opening=20) == 32 - 20 + OPEN_QUEUE  # it lasted COOLDOWN_S


def test_a_cut_on_the_deadline_use_still_happens_while_sessions_queue_to_open() -> None:
    m = Machine(500)
    for _ in range(3):
        m.later(SETTLE_S, 0.01, waiting=400)
    assert m.admission.allowed == 128
    assert m.later(COOLDOWN_S, HIGH_USE * 2, waiting=400, opening=20) == int(128 * BETA)
    assert "of their deadlines" in m.admission.reason and m.admission.decreases == 1


def test_time_held_back_is_counted_while_tasks_wait_under_the_ceiling() -> None:
    m = Machine(20)
    m.later(3.0, 0.5, running=INITIAL, waiting=4)
    assert m.admission.held_s == pytest.approx(3.0)
    m.later(3.0, 0.5, running=1, waiting=0)
    assert m.admission.held_s == pytest.approx(3.0)
    state = m.admission.state()
    assert state.held == 0 and state.ceiling == 20 and state.limit == m.admission.allowed


# -- the gate ------------------------------------------------------------------------------------------
async def test_the_gate_lets_the_limit_in_and_the_others_in_turn() -> None:
    m = Machine(10, initial=2)
    entered: list[int] = []
    inside = {i: asyncio.Event() for i in range(4)}
    release = {i: asyncio.Event() for i in range(4)}

    async def session(i: int) -> None:
        async with m.admission.place():
            entered.append(i)
            inside[i].set()
            await release[i].wait()

    tasks = []
    for i in range(4):
        tasks.append(asyncio.create_task(session(i)))
        if i < 2:
            await asyncio.wait_for(inside[i].wait(), 5)
    await asyncio.wait_for(waiting(m.admission, 2), 5)
    assert entered == [0, 1] and m.admission.running == 2
    release[0].set()
    await asyncio.wait_for(inside[2].wait(), 5)  # the first one waiting, not the last
    assert entered == [0, 1, 2] and m.admission.waiting == 1
    m.admission.clock.t += SETTLE_S  # type: ignore[attr-defined]
    m.answers(0.01)
    m.admission.update()  # the limit doubles: the last one gets in at once
    await asyncio.wait_for(inside[3].wait(), 5)
    assert m.admission.peak_running == 3
    for event in release.values():
        event.set()
    await asyncio.gather(*tasks)
    assert m.admission.running == 0 and m.admission.waiting == 0


async def test_a_task_cancelled_while_it_waits_takes_no_place() -> None:
    m = Machine(10, initial=1)
    inside = asyncio.Event()
    leave = asyncio.Event()

    async def holder() -> None:
        async with m.admission.place():
            inside.set()
            await leave.wait()

    async def waiter() -> None:
        async with m.admission.place():
            pass

    held = asyncio.create_task(holder())
    await inside.wait()
    task = asyncio.create_task(waiter())
    await asyncio.wait_for(waiting(m.admission, 1), 5)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    leave.set()
    await held
    assert m.admission.running == 0 and m.admission.waiting == 0
    async with m.admission.place():  # the place is free again
        assert m.admission.running == 1


async def waiting(admission: Admission, n: int) -> None:
    """Until ``n`` tasks wait at the gate (each got as far as it goes before the next turn)."""
    while admission.waiting < n:  # noqa: ASYNC110 - the gate has no event of its own to wait on
        await asyncio.sleep(0)


# -- what it shows -----------------------------------------------------------------------------------
def test_the_live_line_and_the_summary_say_how_many_run_and_why_tasks_are_held_back() -> None:
    m = Machine(500)
    m.later(COOLDOWN_S, HIGH_USE * 2, running=16, waiting=300)  # the browsers do not keep up: fewer
    stats = BatchStats(total=500, already_done=0)
    stats.in_flight = 16
    stats.admission = m.admission.state()
    line = BatchProgress(quiet=True).line(stats)
    assert "16 running (at most 11 of 500; 300 held back: browser commands at 100% of their deadlines (p90)" in line
    stats.commands = {"answered": 40, "extended": 3, "expired": 1}
    summary = summarize([], stats, AgentConfig(), attempts=1)
    assert summary.admission.limit == 11 and summary.admission.decreases == 1
    assert summary.admission.ceiling == 500 and summary.run.browser_commands["extended"] == 3
    text = render(summary)
    assert "sessions at once (admission)" in text and "peak 0 of 500, limit 11-16, 1 decreases" in text
    assert "given more time / given up" in text and "3 / 1 of 40 answered" in text
    stats.admission = Machine(8).admission.state()  # all may run: nothing to say
    assert "running," in BatchProgress(quiet=True).line(stats)
