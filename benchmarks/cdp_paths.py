"""What one step's browser work costs Chromium by DevTools path: Playwright's CDP session (the
driver's pipe) against the direct DevTools connection (a WebSocket), with and without the agent's
own session set up beside Playwright's.

N pages of one Chromium (a static page with a button), each doing ``--rounds`` times a JPEG
``Page.captureScreenshot`` at the model's size, a click (three ``Input.dispatchMouseEvent``) and one
``Runtime.evaluate`` reading the view (``--evals``), concurrently, one command after the other or
(``--together``) as the agent sends them, with ``--pause`` seconds between a page's steps. Modes,
run one after the other, each in its own browser:

- ``pw``: the commands over Playwright's CDP session, no other session on the page;
- ``ws``: over a direct DevTools session, nothing enabled on it;
- ``ws-enable``: over a direct session set up as the agent's (``Page.enable``, file chooser
  interception, the caret script);
- ``pw+idle``: over Playwright's session, while a direct session set up as the agent's sits idle.

Printed per mode: steps/s and CPU ms per step by process and by thread of Chromium's browser and
GPU processes (``benchmarks/throughput.py``'s monitor).

    python benchmarks/cdp_paths.py --sessions 50 --rounds 20 --repeat 2
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from playwright.async_api import async_playwright
from throughput import Meter

from webagent.browser.devtools import devtools_for
from webagent.browser.launcher import launch_browser
from webagent.browser.scripts import HIDE_CARET, VIEW_NOW
from webagent.config import BrowserConfig

MODES = ("pw", "ws", "ws-enable", "pw+idle")
PAGE = (
    "data:text/html,<title>c</title><style>button{position:absolute;left:100px;top:100px;width:200px;height:60px}"
    "</style><button onclick='this.textContent=+this.textContent+1'>0</button><p style='margin-top:200px'>"
    + "text "
    * 300
)
SHOT = {
    "format": "jpeg",
    "quality": 75,
    "optimizeForSpeed": True,
    "clip": {"x": 0, "y": 0, "width": 1280, "height": 800, "scale": 0.984},
}
CLICK = [
    {"type": "mouseMoved", "x": 200, "y": 130},
    {"type": "mousePressed", "x": 200, "y": 130, "button": "left", "clickCount": 1},
    {"type": "mouseReleased", "x": 200, "y": 130, "button": "left", "clickCount": 1},
]


async def step(channel: Any, evals: int, together: bool) -> None:
    view = {"expression": VIEW_NOW, "returnByValue": True, "awaitPromise": True}
    if together:  # as the agent sends them: the click's events in one go, the capture with settle's check
        await asyncio.gather(*(channel.send("Input.dispatchMouseEvent", event) for event in CLICK))
        await asyncio.gather(
            channel.send("Page.captureScreenshot", SHOT),
            *(channel.send("Runtime.evaluate", view) for _ in range(evals)),
        )
        return
    await channel.send("Page.captureScreenshot", SHOT)
    for event in CLICK:
        await channel.send("Input.dispatchMouseEvent", event)
    for _ in range(evals):
        await channel.send("Runtime.evaluate", view)


async def run(mode: str, n: int, rounds: int, args: argparse.Namespace) -> str:
    async with async_playwright() as pw:
        browser = await launch_browser(pw, BrowserConfig(contexts_per_browser=n, direct_cdp=True))
        devtools = devtools_for(browser)
        if devtools is None:
            raise SystemExit("no direct DevTools connection to this browser")
        channels = []
        for _ in range(n):
            context = await browser.new_context(viewport={"width": 1280, "height": 800}, device_scale_factor=1)
            page = await context.new_page()
            await page.goto(PAGE)
            # Playwright's session only where it carries the commands (no idle one beside the direct one).
            channel: Any = await context.new_cdp_session(page) if mode in ("pw", "pw+idle") else None
            if mode != "pw":
                own = await devtools.attach(context, page)
                if mode in ("ws-enable", "pw+idle"):  # as PageState._set_up does
                    await own.send("Page.enable")
                    await asyncio.gather(
                        own.send("Page.setInterceptFileChooserDialog", {"enabled": True}),
                        own.send("Page.getFrameTree"),
                        own.send("Page.addScriptToEvaluateOnNewDocument", {"source": HIDE_CARET}),
                        own.send("Runtime.evaluate", {"expression": HIDE_CARET}),
                    )
                if mode != "pw+idle":
                    channel = own
            channels.append(channel)
        await asyncio.sleep(2)  # the pages' first frames and loads are over

        async def session(channel: Any) -> None:
            for _ in range(rounds):
                await step(channel, args.evals, args.together)
                await asyncio.sleep(args.pause)

        with Meter(set()) as meter:
            t0 = time.monotonic()
            await asyncio.gather(*(session(c) for c in channels))
            t1 = time.monotonic()
        await browser.close()
    steps = n * rounds
    split = meter.split(t0, t1)
    total = sum(v for k, v in split.items() if not k.startswith(("thread ", "processes ")))
    parts = sorted(
        ((k, v / steps * 1000) for k, v in split.items() if not k.startswith("processes ")), key=lambda kv: -kv[1]
    )
    shown = "  ".join(f"{k.removeprefix('chromium ')} {v:.1f}" for k, v in parts if v >= 0.3)
    return f"{mode:9s} N={n}: {steps / (t1 - t0):.1f} steps/s, {total / steps * 1000:.1f} ms CPU/step  ({shown})"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").partition("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=20, help="steps per page")
    parser.add_argument("--repeat", type=int, default=1, help="passes over the modes, alternating")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--evals", type=int, default=1, help="Runtime.evaluate reads of the view per step")
    parser.add_argument("--together", action="store_true", help="send a step's commands as the agent does")
    parser.add_argument("--pause", type=float, default=0.0, help="seconds between a page's steps (a model's latency)")
    parser.add_argument("--deadline", type=float, default=900.0, help="seconds a mode may take in all")
    args = parser.parse_args()
    for _ in range(args.repeat):
        for mode in args.modes.split(","):
            try:
                print(
                    asyncio.run(asyncio.wait_for(run(mode, args.sessions, args.rounds, args), args.deadline)),
                    flush=True,
                )
            except TimeoutError:
                raise SystemExit(
                    f"{mode}: not done within {args.deadline:g} s (a browser that stopped answering?)"
                ) from None


if __name__ == "__main__":
    main()
