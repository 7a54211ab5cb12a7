"""The page's time and randomness under a seed: what makes a seeded reset repeatable.

A seeded episode's browser context gets, before its start page loads, its clock paused at a time
derived from the seed (``seeded_time``) and ``Math.random`` seeded. The clock is Playwright's
(``BrowserContext.clock``): ``Date``, ``performance.now``, ``setTimeout`` / ``setInterval``,
``requestAnimationFrame`` and ``requestIdleCallback`` of every document of the context follow it.
The page's time then moves only when the environment runs it: ``STEP_MS`` once the start page is
open (and the task started), and ``STEP_MS`` after each action, firing the page's timers and
animation frames in order, as if each step took that long. So the same seed and the same actions
give the same observations, an animated page (MiniWoB++'s chase-circle) included.

What stays outside: a live site's answers and network timing (a response lands whenever it
arrives; the page handles it at that point of its paused time), CSS animations and transitions the
compositor runs by itself, ``crypto.getRandomValues``, and workers' own clocks.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

from playwright.async_api import BrowserContext
from playwright.async_api import Error as PlaywrightError

from ..errors import BrowserError, BrowserTimeoutError

__all__ = ["EPOCH_S", "STEP_MS", "PageClock", "random_script", "seeded_time"]

#: The page's time at seed 0: 2024-01-01T00:00:00Z (seconds); seed n starts n seconds later.
EPOCH_S = 1_704_067_200
#: How long each step lasts in the page's time (ms): after the start, and after each action.
STEP_MS = 500
#: Seeds spread over this many seconds (about 31 years) after ``EPOCH_S``.
_SPAN_S = 1_000_000_000
#: Bound on one clock command (the page runs the timers due in ``STEP_MS`` meanwhile).
_TIMEOUT_S = 15.0


def seeded_time(seed: int) -> int:
    """The page's time (seconds since the epoch) at the start of an episode of ``seed``."""
    return EPOCH_S + seed % _SPAN_S


def random_script(seed: int) -> str:
    """An init script that replaces ``Math.random`` with a generator seeded by ``seed`` (sfc32)."""
    words = [(seed >> shift) & 0xFFFFFFFF for shift in (0, 32, 64)]
    return f"""(() => {{
  let a = {words[0]} >>> 0, b = {words[1]} >>> 0, c = {words[2]} >>> 0, d = 1;
  const next = () => {{
    const t = (((a + b) >>> 0) + d) >>> 0;
    d = (d + 1) >>> 0;
    a = b ^ (b >>> 9);
    b = (c + (c << 3)) >>> 0;
    c = ((c << 21) | (c >>> 11)) >>> 0;
    c = (c + t) >>> 0;
    return t / 4294967296;
  }};
  for (let i = 0; i < 15; i++) next();
  Math.random = next;
}})();"""


class PageClock:
    """The time of one episode's browser context (see the module docstring)."""

    def __init__(self, context: BrowserContext, seed: int, *, step_ms: int = STEP_MS) -> None:
        self.context = context
        self.seed = seed
        self.step_ms = step_ms

    async def install(self) -> None:
        """Before the start page loads: ``Math.random`` seeded, the clock paused at ``seeded_time``.

        Only ``pause_at`` (not ``install`` and then ``pause_at``): a new document replays the clock's
        commands, and the real time between those two would move its timers off their ticks."""
        await self._bounded(self.context.add_init_script(random_script(self.seed)), "seed Math.random")
        await self._bounded(self.context.clock.pause_at(seeded_time(self.seed)), "pause the page's clock")

    async def step(self) -> None:
        """Let ``step_ms`` of the page's time pass, its timers and animation frames fired in order."""
        await self._bounded(self.context.clock.run_for(self.step_ms), "run the page's clock")

    async def _bounded(self, work: Awaitable[object], what: str) -> None:
        try:
            async with asyncio.timeout(_TIMEOUT_S):
                await work
        except TimeoutError:
            raise BrowserTimeoutError(f"cannot {what}: no answer within {_TIMEOUT_S:g} s") from None
        except PlaywrightError as exc:
            raise BrowserError(f"cannot {what}: {str(exc).splitlines()[0]}") from None
