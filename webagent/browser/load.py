"""What the browsers' answers say about the machine under them.

Every bounded browser command that is answered tells ``BrowserLoad`` how long it took against its
deadline (its *deadline use*: 0.1 is a tenth of the deadline). Two readers:

- a batch's admission control (``webagent.batch.admission``) holds new sessions back while the
  recent deadline use is high: the machine is serving as many sessions as it can;
- a command past its deadline asks ``grace`` whether to wait longer. On a saturated machine (other
  commands are answered, but slowly: their recent deadline use is high) a command that has not
  answered yet is most likely slow, not lost: it gets more time, up to ``MAX_SCALE`` deadlines in
  all. When nothing answers at all (no answer anywhere for a whole deadline, or none from its own
  browser since it was sent: a frozen browser), or when the others are answered quickly (this one
  was lost: a screenshot Chromium never answers), the deadline stands, and the recovery that
  follows it (a screenshot taken again, a page reopened, a browser retired) happens as before.

Only where a batch has set one (``deadline.browser_load``): elsewhere every deadline is as configured.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Protocol

__all__ = ["BUSY_USE", "MAX_SCALE", "WINDOW_S", "Answers", "BrowserLoad"]

#: Seconds of recent answers that say how loaded the machine is.
WINDOW_S = 10.0
#: The 90th percentile of recent deadline use above which the machine counts as saturated.
BUSY_USE = 0.25
#: A command past its deadline on a saturated machine waits at most this many deadlines in all.
MAX_SCALE = 4.0
_KEEP = 4096  # answers kept (a window's worth at a few hundred commands a second)


class Answers(Protocol):
    """One browser's answers so far (its direct DevTools connection counts them): whether it still
    answers anything at all while a command waits."""

    replies: int


class BrowserLoad:
    """Recent answers of bounded browser commands: their latency against their deadlines."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, window_s: float = WINDOW_S) -> None:
        self.clock = clock
        self.window_s = window_s
        self._uses: deque[tuple[float, float]] = deque(maxlen=_KEEP)  # (when, latency / deadline)
        self._latencies: deque[tuple[float, float]] = deque(maxlen=_KEEP)  # (when, latency in seconds)
        #: ``clock()`` of the last answer (any command, any browser).
        self.last_answer = float("-inf")
        self.answered = 0
        #: Commands past their deadline that got more time (the machine was saturated) ...
        self.extended = 0
        #: ... and those whose deadline stood (nothing answered, or the others quickly).
        self.expired = 0

    def now(self) -> float:
        return self.clock()

    def answer(self, latency_s: float, deadline_s: float) -> None:
        """A command with ``deadline_s`` was answered after ``latency_s``."""
        now = self.clock()
        self.last_answer = now
        self.answered += 1
        self._uses.append((now, latency_s / deadline_s if deadline_s > 0 else 0.0))
        self._latencies.append((now, latency_s))

    def expire(self, waited_s: float, deadline_s: float) -> None:
        """A command was given up after ``waited_s`` (its deadline, or more): counted as a use past 1."""
        self.expired += 1
        self._uses.append((self.clock(), waited_s / deadline_s if deadline_s > 0 else 1.0))

    def use(self, q: float = 0.9, *, window_s: float | None = None) -> float | None:
        """The ``q``-quantile of the deadline use of the last ``window_s`` (default: the gauge's
        window; None: no answer in it)."""
        uses = self._recent(self._uses)
        if window_s is not None and window_s < self.window_s:
            since = self.clock() - window_s
            uses = [use for when, use in self._uses if when >= since]
        return _quantile(uses, q)

    def latency(self, q: float = 0.9) -> float | None:
        """The ``q``-quantile of the latency of the commands answered in the last ``window_s``."""
        return _quantile(self._recent(self._latencies), q)

    @property
    def busy(self) -> bool:
        """Saturated: the recent answers took a good part of their deadlines."""
        use = self.use()
        return use is not None and use >= BUSY_USE

    def grace(self, started: float, deadline_s: float, *, browser_answered: bool | None = None) -> float:
        """Seconds more for a command sent at ``started`` (``clock()``) and past ``deadline_s``: 0 when
        its deadline stands. ``browser_answered``: whether its own browser answered anything since it
        was sent (None: not known)."""
        now = self.clock()
        left = MAX_SCALE * deadline_s - (now - started)
        if left <= 0 or browser_answered is False or now - self.last_answer > deadline_s or not self.busy:
            return 0.0
        self.extended += 1
        return min(deadline_s / 2, left)

    def _recent(self, samples: deque[tuple[float, float]]) -> list[float]:
        """The values of the last ``window_s`` (older ones are dropped)."""
        since = self.clock() - self.window_s
        while samples and samples[0][0] < since:
            samples.popleft()
        return [value for _, value in samples]


def _quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]
