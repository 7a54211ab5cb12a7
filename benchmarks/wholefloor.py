"""The whole-batch floor of ``benchmarks/throughput.py``, and the DevTools command counter both sides share.

The steady-state floor (``throughput.floor``) times the middle 80 % of steps of a loop on contexts
opened up front: it leaves out what a batch pays to open and close its sessions. The whole-batch
floor pays for what the agent pays for:

- a fresh context per task, opened when the task starts and closed when it ends;
- the same task mix (S steps: a screenshot each, a click after each but the last) and, per step,
  the same simulated model latency as the agent's run (the agent's mean model wait per step);
- the same browser launch (``launch_browser``, direct DevTools connection on) and the same CDP
  path for the step's commands (``DevToolsSession``: the screenshot, the click);
- its wall time from the launch to the last close, and its CPU over that time from the same
  process-tree instrument (``throughput.Meter``) as the agent's;
- the same admission as the agent's batch (``BatchRunner``): its tasks take their places through
  ``webagent.batch.admission.Admission`` (AIMD from ``INITIAL`` sessions up to N, every ``TICK_S``,
  on the floor's own ``BrowserLoad``: the deadline use of its bounded commands, context opens
  included), and open their contexts and pages ``OPENS_AT_ONCE`` at a time (the browser pool's
  gate, whose queue the admission reads as the agent's does); its commands have the agent's
  deadlines, measured the same way (``deadline.browser_load``): 30 s, given more on a saturated
  machine by ``BrowserLoad.grace`` alike on both sides. How many were given more or expired is
  printed for both (``deadlines``), so a stall is seen, not hidden. Without the admission, 500
  contexts opened at once in one Chromium held a screenshot unanswered past its deadline.

``CDPCount`` counts the commands sent on the direct DevTools connections of this process (the
agent's hot path and the floor's), by method: ``Runtime.evaluate`` per step and commands per step
for both sides. Playwright's own commands (contexts, pages, ``goto``) go through its driver and
are not counted, on either side.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from playwright.async_api import async_playwright

from webagent.batch.admission import INITIAL, TICK_S, Admission
from webagent.browser.deadline import browser_load, within
from webagent.browser.devtools import DevTools, devtools_for
from webagent.browser.launcher import launch_browser
from webagent.browser.load import BrowserLoad
from webagent.browser.pool import OPENS_AT_ONCE
from webagent.config import PROFILES, BrowserConfig
from webagent.families import DEFAULT_PROFILE
from webagent.images import frame_for

__all__ = ["CDPCount", "OpenGate", "count_cdp", "deadlines", "whole_figures", "whole_floor"]

BUTTON = (640, 400)


class CDPCount(Counter[str]):
    """Commands sent on this process's direct DevTools connections, by method."""

    def per_step(self, steps: int) -> dict[str, float]:
        """``Runtime.evaluate`` and all commands, per step (whole run: opening and closing included)."""
        steps = max(steps, 1)
        return {
            "Runtime.evaluate/step": round(self["Runtime.evaluate"] / steps, 2),
            "CDP commands/step": round(sum(self.values()) / steps, 2),
        }


def capture_params(config: BrowserConfig) -> dict[str, Any]:
    """The floor's screenshot: a JPEG at the model's size, as the agent's capture asks for it."""
    frame = frame_for(1280, 800, PROFILES[DEFAULT_PROFILE])
    return {
        "format": "jpeg",
        "quality": config.jpeg_quality,
        "optimizeForSpeed": True,
        "clip": {"x": 0, "y": 0, "width": frame.css_width, "height": frame.css_height, "scale": frame.scale},
    }


@contextmanager
def count_cdp() -> Iterator[CDPCount]:
    """Count every command ``DevTools.request`` sends while inside (a counting hook on the class)."""
    counts = CDPCount()
    original = DevTools.request

    def request(self: DevTools, method: str, *args: Any, **kwargs: Any) -> Any:
        counts[method] += 1
        return original(self, method, *args, **kwargs)

    setattr(DevTools, "request", request)  # noqa: B010 (a method replaced: mypy allows setattr)
    try:
        yield counts
    finally:
        setattr(DevTools, "request", original)  # noqa: B010


async def whole_floor(url: str, n: int, steps: int, pause: float, meter: Any) -> dict[str, Any]:
    """N tasks, each on a fresh context: ``steps`` screenshots, a click after each but the last,
    ``pause`` seconds of simulated model latency per step; admitted as the agent's batch admits
    its sessions (``Admission`` on the floor's own ``BrowserLoad``, ``OPENS_AT_ONCE`` opening at
    a time). ``meter``: an entered ``throughput.Meter`` (read after it exits: ``whole_figures``).
    A task that fails does not stop the others; the floor fails once all have ended, naming how
    many failed and the first error."""
    config = BrowserConfig(contexts_per_browser=max(n, 1))
    params = capture_params(config)
    load = BrowserLoad()
    admission = Admission(n, load, initial=INITIAL)
    gate = OpenGate()
    done = [0]
    token = browser_load.set(load)  # every bounded command measured, as in the agent's batch
    try:
        async with async_playwright() as pw:
            start = time.monotonic()
            browser = await launch_browser(pw, config)
            devtools = devtools_for(browser)
            if devtools is None:
                raise RuntimeError("the whole-batch floor needs the direct DevTools connection (browser.direct_cdp)")
            timeout_s = config.open_timeout_s

            async def task() -> None:
                async with admission.place():
                    async with gate:  # the pool's open path: OPENS_AT_ONCE at a time a browser
                        context = await within(
                            browser.new_context(viewport={"width": 1280, "height": 800}, device_scale_factor=1),
                            timeout_s,
                            "new_context",
                        )
                        try:
                            page = await within(context.new_page(), timeout_s, "new_page")
                        except BaseException:  # as the agent's session does: its context closed too
                            await within(context.close(), timeout_s, "context.close")
                            raise
                    try:
                        await page.goto(url, timeout=config.navigation_timeout_s * 1000)
                        cdp = await devtools.attach(context, page)
                        # A page just loaded may have no frame to capture yet ("Unable to capture screenshot").
                        frames = "new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))"
                        await cdp.send("Runtime.evaluate", {"expression": frames, "awaitPromise": True})
                        for i in range(steps):
                            await cdp.send("Page.captureScreenshot", params)
                            if pause:
                                await asyncio.sleep(pause)
                            if i < steps - 1:
                                await cdp.click(*BUTTON)
                            done[0] += 1
                        await cdp.detach()
                    finally:
                        await within(context.close(), timeout_s, "context.close")

            async def tick() -> None:  # the batch's tick: the limit reconsidered every TICK_S
                while True:
                    await asyncio.sleep(TICK_S)
                    admission.update(gate.waiting)

            ticking = asyncio.create_task(tick())
            try:
                outcomes = await asyncio.gather(*(task() for _ in range(n)), return_exceptions=True)
            finally:
                ticking.cancel()
            end = time.monotonic()
            await browser.close()
    finally:
        browser_load.reset(token)
    failed = [o for o in outcomes if isinstance(o, BaseException)]
    if failed:
        first = str(failed[0]).strip().splitlines()[0] if str(failed[0]).strip() else ""
        raise RuntimeError(f"{len(failed)} of {n} floor tasks failed; the first: {type(failed[0]).__name__}: {first}")
    return {
        "start": start,
        "end": end,
        "steps": done[0],
        "tasks": n,
        "succeeded": n,
        "deadlines": deadlines(load),
        "peak_sessions": admission.peak_running,
    }


def deadlines(load: BrowserLoad) -> dict[str, int]:
    """Commands answered, given more time on a saturated machine, and past their deadline."""
    return {"answered": load.answered, "extended": load.extended, "expired": load.expired}


class OpenGate:
    """``OPENS_AT_ONCE`` context opens at a time, like the pool's per browser; ``waiting``: how many
    wait for their turn (what the admission reads as its opening queue)."""

    def __init__(self) -> None:
        self._slots = asyncio.Semaphore(OPENS_AT_ONCE)
        self.waiting = 0

    async def __aenter__(self) -> None:
        self.waiting += 1
        try:
            await self._slots.acquire()
        finally:
            self.waiting -= 1

    async def __aexit__(self, *exc: object) -> None:
        self._slots.release()


def whole_figures(run: dict[str, Any], meter: Any) -> dict[str, Any]:
    """Steps/s, tasks per hour, CPU ms/step and its split by process kind (``split``, ms a step) of a
    run timed from ``start`` to ``end``."""
    wall = run["end"] - run["start"]
    steps = max(run["steps"], 1)
    return {
        "peak_sessions": run.get("peak_sessions", 0),
        "deadlines": run.get("deadlines", {}),
        "wall_s": wall,
        "steps_per_s": run["steps"] / wall,
        "tasks_per_hour": run["tasks"] / wall * 3600,
        "cpu_per_step_ms": (meter.cpu_at(run["end"]) - meter.cpu_at(run["start"])) / steps * 1000,
        "split": {k: round(v / steps * 1000, 1) for k, v in meter.split(run["start"], run["end"]).items()},
        "success_rate": run["succeeded"] / max(run["tasks"], 1),
    }
