"""The page's time and randomness under a seed: what makes a seeded reset repeatable.

A seeded episode's browser context gets, before its start page loads, its clock paused at a time
derived from the seed (``seeded_time``) and ``Math.random`` seeded. The clock is Playwright's
(``BrowserContext.clock``): ``Date``, ``performance.now``, ``setTimeout`` / ``setInterval``,
``requestAnimationFrame`` and ``requestIdleCallback`` of every document of the context follow it.
The page's time then moves only when the environment runs it: ``STEP_MS`` once the start page is
open (and the task started), and ``STEP_MS`` after each action, firing the page's timers and
animation frames in order, as if each step took that long. After each step the environment waits
(in real time, bounded) for the requests the page has in flight and for their images to be painted,
so that a step's observation does not depend on how quick the network was. So the same seed and the same actions
give the same observations, an animated page (MiniWoB++'s chase-circle) included.

What stays outside: a live site's answers, and network timing past that wait (a page that keeps a
request open, a response slower than ``QUIET_S``: it lands whenever it arrives), CSS animations and transitions the
compositor runs by itself, ``crypto.getRandomValues``, and workers' own clocks.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable

from playwright.async_api import Error as PlaywrightError
from playwright.async_api import Request

from ..browser.crashes import browser_failure
from ..browser.session import BrowserSession
from ..errors import BrowserTimeoutError

__all__ = ["EPOCH_S", "QUIET_S", "STEP_MS", "PageClock", "random_script", "seeded_time"]

#: The page's time at seed 0: 2024-01-01T00:00:00Z (seconds); seed n starts n seconds later.
EPOCH_S = 1_704_067_200
#: How long each step lasts in the page's time (ms): after the start, and after each action.
STEP_MS = 500
#: Seeds spread over this many seconds (about 31 years) after ``EPOCH_S``.
_SPAN_S = 1_000_000_000
#: Bound on one clock command (the page runs the timers due in ``STEP_MS`` meanwhile).
_TIMEOUT_S = 15.0
#: The longest wait, in real time, for a step's requests and their images (a page that never goes
#: quiet, a long poll, costs this much a step).
QUIET_S = 3.0
# The page's images decoded, then two frames of the browser's (its real ones: the page's are paused).
_PAINTED = """async () => {
  await Promise.all(Array.from(document.images, (i) => i.complete ? 0 : i.decode().catch(() => 0)));
  const real = globalThis.__pwClock ? globalThis.__pwClock.builtins : globalThis;
  await new Promise((r) => real.requestAnimationFrame(() => real.requestAnimationFrame(r)));
}"""


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

    def __init__(self, session: BrowserSession, seed: int, *, step_ms: int = STEP_MS) -> None:
        self.session = session
        self.context = session.context
        self.seed = seed
        self.step_ms = step_ms
        self._pending: set[Request] = set()  # the context's http(s) requests in flight
        self._quiet = asyncio.Event()  # set while none is
        self._quiet.set()

    async def install(self) -> None:
        """Before the start page loads: ``Math.random`` seeded, the clock paused at ``seeded_time``.

        Only ``pause_at`` (not ``install`` and then ``pause_at``): a new document replays the clock's
        commands, and the real time between those two would move its timers off their ticks."""
        self.context.on("request", self._started)
        self.context.on("requestfinished", self._ended)
        self.context.on("requestfailed", self._ended)
        await self._bounded(self.context.add_init_script(random_script(self.seed)), "seed Math.random")
        await self._bounded(self.context.clock.pause_at(seeded_time(self.seed)), "pause the page's clock")

    async def step(self) -> None:
        """Let ``step_ms`` of the page's time pass, its timers and animation frames fired in order;
        then wait for what they asked of the network (``settle``). The screenshot the last action's
        settle took ahead shows the page before this time passed: it is dropped, so that the step's
        observation is taken after it (kept, it raced the clock: early under a light load, late under
        a heavy one, and the same seed gave another frame)."""
        await self.session.discard_capture()  # answered first: a capture pending there takes the next frame
        await self._bounded(self.context.clock.run_for(self.step_ms), "run the page's clock")
        await self.settle()

    async def settle(self) -> None:
        """Wait (up to ``QUIET_S``) for the context's requests in flight, then for their images to be
        decoded and painted: an image a step's new elements ask for (MiniWoB++'s icons, set by CSS
        once the task has started) shows in its observation every time, not when the network is quick."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(QUIET_S):
                await self._quiet.wait()
        with contextlib.suppress(PlaywrightError, TimeoutError):  # a page going away: its next look says so
            async with asyncio.timeout(QUIET_S):
                await self.session.page.evaluate(_PAINTED)

    def _started(self, request: Request) -> None:
        if request.url.startswith(("http:", "https:")):
            self._pending.add(request)
            self._quiet.clear()

    def _ended(self, request: Request) -> None:
        self._pending.discard(request)
        if not self._pending:
            self._quiet.set()

    async def _bounded(self, work: Awaitable[object], what: str) -> None:
        try:
            async with asyncio.timeout(_TIMEOUT_S):
                await work
        except TimeoutError:
            raise BrowserTimeoutError(f"cannot {what}: no answer within {_TIMEOUT_S:g} s") from None
        except PlaywrightError as exc:  # a page or context gone: a BrowserCrashError (the infrastructure's)
            raise browser_failure(exc, f"cannot {what}") from None
