"""Admission control: a batch opens a new session only while the browsers keep up.

The measure is the browsers' own (``BrowserLoad``): how much of their deadlines the bounded browser
commands took over the last ``WINDOW_S`` (session set-up included: new contexts, tabs, the navigation
guard). The number of sessions allowed at once (``limit``, between ``floor`` and ``ceiling``,
``--concurrency``) follows AIMD:

- while the 90th percentile of that deadline use stays under ``LOW_USE`` and tasks wait for a place,
  the limit grows: doubling at first (slow start), then by a tenth, at most once per ``SETTLE_S``, so
  that the sessions just admitted show in the measure first;
- above ``HIGH_USE`` it shrinks to ``BETA`` times the sessions running (at most once per
  ``COOLDOWN_S``; not while more run than the limit already, as the running ones are never stopped);
- in between it holds;
- while more than ``OPEN_QUEUE`` admitted sessions wait for their turn to open (the pool opens a
  few at a time a browser: ``webagent.browser.pool``), the limit does not grow: the browsers open
  sessions slower than they are admitted, and a session waiting there is held, not served (on a
  saturated machine hundreds did, each with its run, its watchdog and its clients: 0.69 of a bare
  loop's steps/s beside 4 hogs at 500 sessions; 0.72-0.85 held by this rule). When such a queue
  lasts ``COOLDOWN_S``, the limit comes down to the sessions open or opening, plus ``OPEN_QUEUE``
  (a decrease, after which it grows by a tenth at a time); the cut on the deadline use applies
  meanwhile as above.

At least ``floor`` (1) session always runs, so a batch always makes progress; the limit never passes
the ceiling. The model side keeps its own limits (a server's 429 and queue, the client's retries):
model latency is not in the measure.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import structlog

from ..browser.load import BrowserLoad
from .stats import AdmissionState

__all__ = [
    "BETA",
    "COOLDOWN_S",
    "HIGH_USE",
    "INITIAL",
    "LOW_USE",
    "OPEN_QUEUE",
    "SETTLE_S",
    "TICK_S",
    "WINDOW_S",
    "Admission",
]

log = structlog.get_logger("webagent.batch")

#: Sessions admitted at first (or the ceiling, if lower).
INITIAL = 16
#: Deadline use (90th percentile) under which more sessions are admitted ...
LOW_USE = 0.25
#: ... and over which fewer.
HIGH_USE = 0.5
#: The limit after a decrease, as a share of the sessions running.
BETA = 0.7
#: Seconds of answers the measure looks at.
WINDOW_S = 3.0
#: Seconds between two increases (new sessions set up and in the measure) ...
SETTLE_S = 2.0
#: ... and between two decreases.
COOLDOWN_S = 5.0
#: How often the limit is reconsidered.
TICK_S = 1.0
#: Admitted sessions that may wait for their turn to open before the limit stops growing.
OPEN_QUEUE = 8


class Admission:
    """How many sessions run at once: AIMD on the browsers' measured deadline use."""

    def __init__(
        self,
        ceiling: int,
        load: BrowserLoad,
        *,
        floor: int = 1,
        initial: int = INITIAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not 1 <= floor <= ceiling:
            raise ValueError("admission needs 1 <= floor <= ceiling")
        self.ceiling = ceiling
        self.floor = floor
        self.load = load
        self.clock = clock
        self.limit = float(max(floor, min(ceiling, initial)))
        self.running = 0
        #: Tasks waiting for a place.
        self.waiting = 0
        self.slow_start = True
        self.reason = "starting"
        self.decreases = 0
        self.lowest = self.highest = int(self.limit)
        self.peak_running = 0
        self.held_s = 0.0  # time with tasks waiting while the limit was under the ceiling
        self._last_increase = self._last_decrease = self._last_tick = clock()
        self._queued_since: float | None = None  # since when more than OPEN_QUEUE wait to open
        self._waiters: deque[asyncio.Future[None]] = deque()

    # -- the decision ---------------------------------------------------------------------------
    def update(self, opening: int = 0) -> None:
        """Reconsider the limit from the measure of the last ``WINDOW_S`` (called every ``TICK_S``);
        ``opening``: the sessions admitted that wait for their turn to open."""
        now = self.clock()
        if self.waiting and self.allowed < self.ceiling:
            self.held_s += now - self._last_tick
        self._last_tick = now
        queued = opening > OPEN_QUEUE
        if not queued:
            self._queued_since = None
        elif self._queued_since is None:
            self._queued_since = now
        cut = self._on_use(now, grow=not queued)  # a cut on the deadline use holds during a queue too
        if self._queued_since is not None and not cut:
            self._opening_queue(now, opening, self._queued_since)
        self.lowest = min(self.lowest, self.allowed)
        self.highest = max(self.highest, self.allowed)
        self._wake()

    def _opening_queue(self, now: float, opening: int, since: float) -> None:
        """More sessions wait for their turn to open than ``OPEN_QUEUE``: the limit does not grow (nor
        for ``SETTLE_S`` after the queue is gone); once the queue has lasted ``COOLDOWN_S``, it comes
        down to the sessions open or opening, plus ``OPEN_QUEUE`` (at most once per ``COOLDOWN_S``)."""
        shown = f"{opening} sessions waiting for their turn to open"
        self._last_increase = now  # growth waits until the queue has drained and settled
        cap = max(float(self.floor), float(self.running - opening + OPEN_QUEUE))
        if now - since >= COOLDOWN_S and cap < self.limit and now - self._last_decrease >= COOLDOWN_S:
            self.limit = cap
            self.slow_start = False
            self.decreases += 1
            self._last_decrease = now
            self.reason = f"{shown}: fewer sessions"
            log.info("admission_decrease", limit=self.allowed, running=self.running, opening=opening)
        else:
            self.reason = f"{shown}: holding"

    def _on_use(self, now: float, *, grow: bool) -> bool:
        """The AIMD step on the browsers' deadline use (``grow``: an increase allowed); whether it cut."""
        use = self.load.use(0.9, window_s=WINDOW_S)
        if use is None:
            return False  # no answer lately: nothing new to go by
        shown = f"browser commands at {use:.0%} of their deadlines (p90)"
        if use > HIGH_USE:
            if self.running > self.allowed:
                self.reason = f"{shown}; draining to the limit"
            elif now - self._last_decrease >= COOLDOWN_S:
                self.limit = max(float(self.floor), min(self.limit, self.running) * BETA)
                self.slow_start = False
                self.decreases += 1
                self._last_decrease = now
                self.reason = f"{shown}: fewer sessions"
                log.info("admission_decrease", limit=self.allowed, running=self.running, use=round(use, 3))
                return True
        elif use < LOW_USE:
            binding = self.waiting > 0 and self.running >= self.allowed
            if grow and binding and self.allowed < self.ceiling and now - self._last_increase >= SETTLE_S:
                grown = self.limit * 2 if self.slow_start else self.limit + max(1.0, self.limit / 10)
                self.limit = min(float(self.ceiling), grown)
                self._last_increase = now
                self.reason = f"{shown}: more sessions"
            elif binding or self.allowed >= self.ceiling:
                self.reason = shown
        else:
            self.reason = f"{shown}: holding"
        return False

    @property
    def allowed(self) -> int:
        """Sessions allowed at once now."""
        return max(self.floor, min(self.ceiling, math.floor(self.limit)))

    def state(self) -> AdmissionState:
        return AdmissionState(
            limit=self.allowed,
            ceiling=self.ceiling,
            held=self.waiting,
            reason=self.reason,
            lowest=self.lowest,
            highest=self.highest,
            peak_running=self.peak_running,
            decreases=self.decreases,
            held_back_s=round(self.held_s, 1),
        )

    # -- the gate ---------------------------------------------------------------------------------
    @asynccontextmanager
    async def place(self) -> AsyncIterator[None]:
        """A place for one session, in turn: waits while ``allowed`` run (``floor`` always get one)."""
        if self._waiters or not self._room():
            place: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append(place)
            self.waiting += 1
            try:
                await place  # given by _wake, which counts it as running
            except asyncio.CancelledError:
                if place.done() and not place.cancelled():  # given just as it was cancelled: passed on
                    self._leave()
                else:
                    self._waiters.remove(place)
                raise
            finally:
                self.waiting -= 1
        else:
            self.running += 1
        self.peak_running = max(self.peak_running, self.running)
        try:
            yield
        finally:
            self._leave()

    async def tick(self, every_s: float = TICK_S) -> None:
        """Reconsider the limit every ``every_s`` until cancelled."""
        while True:
            await asyncio.sleep(every_s)
            self.update()

    def _room(self) -> bool:
        return self.running < self.allowed or self.running < self.floor

    def _leave(self) -> None:
        self.running -= 1
        self._wake()

    def _wake(self) -> None:
        """Give the places there are to the tasks waiting, first come first served."""
        while self._waiters and self._room():
            place = self._waiters.popleft()
            if not place.done():
                self.running += 1
                place.set_result(None)
