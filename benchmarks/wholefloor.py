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
  process-tree instrument (``throughput.Meter``) as the agent's.

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

from webagent.browser.devtools import DevTools, devtools_for
from webagent.browser.launcher import launch_browser
from webagent.config import PROFILES, BrowserConfig
from webagent.families import DEFAULT_PROFILE
from webagent.images import frame_for

__all__ = ["CDPCount", "count_cdp", "whole_floor"]

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
    """N tasks at once, each on a fresh context: ``steps`` screenshots, a click after each but the
    last, ``pause`` seconds of simulated model latency per step. ``meter``: an entered
    ``throughput.Meter`` (its samples are read after it exits: see ``whole_figures``)."""
    config = BrowserConfig(contexts_per_browser=max(n, 1))
    params = capture_params(config)
    done = [0]
    async with async_playwright() as pw:
        start = time.monotonic()
        browser = await launch_browser(pw, config)
        devtools = devtools_for(browser)
        if devtools is None:
            raise RuntimeError("the whole-batch floor needs the direct DevTools connection (browser.direct_cdp)")

        async def task() -> None:
            context = await browser.new_context(viewport={"width": 1280, "height": 800}, device_scale_factor=1)
            page = await context.new_page()
            await page.goto(url, timeout=300_000)
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
            await context.close()

        await asyncio.gather(*(task() for _ in range(n)))
        end = time.monotonic()
        await browser.close()
    return {"start": start, "end": end, "steps": done[0], "tasks": n, "succeeded": n}


def whole_figures(run: dict[str, Any], meter: Any) -> dict[str, float]:
    """Steps/s, tasks per hour and CPU ms/step of a run timed from ``start`` to ``end``."""
    wall = run["end"] - run["start"]
    steps = max(run["steps"], 1)
    return {
        "wall_s": wall,
        "steps_per_s": run["steps"] / wall,
        "tasks_per_hour": run["tasks"] / wall * 3600,
        "cpu_per_step_ms": (meter.cpu_at(run["end"]) - meter.cpu_at(run["start"])) / steps * 1000,
        "success_rate": run["succeeded"] / max(run["tasks"], 1),
    }
