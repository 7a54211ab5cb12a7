"""What a page costs the browser, by Chromium binary: opening a session, and a page left open.

For each binary of ``--executables`` (default: the full Chromium and its headless shell, those of
them installed), in turns (``--repeat``), on the soak site (``benchmarks/soaksite``):

1. **open**: N sessions (``--sessions``) opened four at a time as the agent's pool does, each
   shot once and closed — the floor's (a context, a page, its load, a CDP session, one capture:
   ``soak.FloorSession``) and the agent's (``BrowserSession.create``, the start URL, the first
   screenshot, which sets up the session's own DevTools session); CPU ms per session, all processes
   (this Python process, the Playwright driver, Chromium) but the site;
2. **idle**: K pages (``--pages``) left open for ``--idle`` seconds, loaded (the start page) and
   still loading (the soak site's page whose image never answers); CPU ms per page-second.

The soak's ``--hog`` rounds spend most of their CPU per step in these two (a page of every task
stays on the never-loading page until its next action), so they say where a binary's step is
cheaper before a 25-minute round does.

    python benchmarks/pagecost.py
    python benchmarks/pagecost.py --sessions 80 --pages 20 --idle 15 --repeat 2
    python benchmarks/pagecost.py --executables /usr/bin/chromium,/usr/bin/chromium-headless-shell
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from playwright.async_api import Error as PlaywrightError
from playwright.async_api import ViewportSize, async_playwright

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import soak  # noqa: E402
from soaksite.server import VIEWPORT  # noqa: E402
from throughput import Meter  # noqa: E402

from webagent.browser.launcher import SYSTEM_CHROMIUM, SYSTEM_HEADLESS_SHELL, launch_browser  # noqa: E402
from webagent.browser.session import BrowserSession  # noqa: E402
from webagent.config import PROFILES, BrowserConfig  # noqa: E402
from webagent.families import DEFAULT_PROFILE  # noqa: E402
from webagent.images import frame_for  # noqa: E402

AT_ONCE = 4  # sessions opening at once (the pool's OPENS_AT_ONCE per browser)
KINDS = ("python", "driver", "chromium browser", "chromium gpu-process", "chromium renderer")


def per(meter: Meter, t0: float, t1: float, units: float) -> dict[str, float]:
    """CPU ms per unit between t0 and t1: in all, and by process kind."""
    split = meter.split(t0, t1)
    row = {"all": round((meter.cpu_at(t1) - meter.cpu_at(t0)) / units * 1000, 2)}
    row.update({k: round(split.get(k, 0.0) / units * 1000, 2) for k in KINDS})
    return row


async def open_cost(executable: str, side: str, origin: str, n: int, exclude: set[int]) -> dict[str, Any]:
    """CPU per session to open, shoot once and close ``n`` sessions, ``side``: floor or agent."""
    config = BrowserConfig(
        executable_path=executable, contexts_per_browser=n, direct_cdp=side == "agent", args=[soak.RESOLVER_RULE]
    )
    frame = frame_for(*VIEWPORT, PROFILES[DEFAULT_PROFILE])
    turn = asyncio.Semaphore(AT_ONCE)
    async with async_playwright() as pw:
        browser = await launch_browser(pw, config)

        async def session(i: int) -> None:
            url = soak.start_url(origin, i, 2000)
            async with turn:
                if side == "floor":
                    s = soak.FloorSession(browser, frame, config, collections.Counter())
                    await s.open(url)
                    await s.shoot()
                    await s.context.close()
                else:
                    agent = await BrowserSession.create(browser, config)
                    await agent.goto(url, start=True)
                    await agent.screenshot(frame)
                    await agent.close()

        try:
            await asyncio.sleep(1.0)  # the launch's own work out of the window
            with Meter(exclude) as meter:
                t0 = time.monotonic()
                await asyncio.gather(*(session(i) for i in range(n)))
                t1 = time.monotonic()
                await asyncio.sleep(1.0)  # what the closes leave to do
            return {"wall_ms": round((t1 - t0) / n * 1000, 1), **per(meter, t0, t1 + 1.0, n)}
        finally:
            with contextlib.suppress(PlaywrightError):
                await browser.close()


async def idle_cost(
    executable: str, kind: str, origin: str, k: int, seconds: float, exclude: set[int]
) -> dict[str, Any]:
    """CPU per page-second of ``k`` pages left open, ``kind``: loaded or loading."""
    config = BrowserConfig(
        executable_path=executable, contexts_per_browser=k, direct_cdp=False, args=[soak.RESOLVER_RULE]
    )
    async with async_playwright() as pw:
        browser = await launch_browser(pw, config)
        try:
            for i in range(k):
                size: ViewportSize = {"width": VIEWPORT[0], "height": VIEWPORT[1]}
                context = await browser.new_context(viewport=size)
                page = await context.new_page()
                url = f"{origin}/hangpage?t=idle{i}" if kind == "loading" else soak.start_url(origin, i, 2000)
                await page.goto(url, wait_until="domcontentloaded", timeout=30_000)
            await asyncio.sleep(2.0)
            with Meter(exclude) as meter:
                t0 = time.monotonic()
                await asyncio.sleep(seconds)
                t1 = time.monotonic()
            return per(meter, t0, t1, k * (t1 - t0))
        finally:
            with contextlib.suppress(PlaywrightError):
                await browser.close()


def installed() -> list[str]:
    full = [p for p in SYSTEM_CHROMIUM if os.access(p, os.X_OK)][:1]
    shell = [p for p in SYSTEM_HEADLESS_SHELL if os.access(p, os.X_OK)][:1]
    return [*full, *shell]


async def measure(args: argparse.Namespace, origin: str, exclude: set[int]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for round_ in range(args.repeat):
        for exe in args.executables:
            for side in ("floor", "agent"):
                row = {"round": round_, "binary": Path(exe).name, "what": f"open ({side})", "unit": "ms/session"}
                row.update(await open_cost(exe, side, origin, args.sessions, exclude))
                rows.append(row)
                print(json.dumps(row), flush=True)
            for kind in ("loaded", "loading"):
                row = {"round": round_, "binary": Path(exe).name, "what": f"idle ({kind})", "unit": "ms/page-s"}
                row.update(await idle_cost(exe, kind, origin, args.pages, args.idle, exclude))
                rows.append(row)
                print(json.dumps(row), flush=True)
    return rows


def table(rows: list[dict[str, Any]]) -> None:
    """The median over rounds of each (binary, what), as a Markdown table."""
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = collections.defaultdict(list)
    for row in rows:
        groups[(row["what"], row["unit"], row["binary"])].append(row)
    print(f"\n| what | binary | CPU all | {' | '.join(KINDS)} |")
    print("|---|---|---|" + "---|" * len(KINDS))
    for (what, unit, binary), group in groups.items():
        mid = sorted(group, key=lambda r: r["all"])[len(group) // 2]
        cells = " | ".join(f"{mid[k]:.1f}" for k in KINDS)
        print(f"| {what} ({unit}) | {binary} | {mid['all']:.1f} | {cells} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--executables", default=",".join(installed()), help="comma-separated Chromium binaries")
    parser.add_argument("--sessions", type=int, default=60, help="sessions opened per binary and side")
    parser.add_argument("--pages", type=int, default=20, help="pages left open per binary and kind")
    parser.add_argument("--idle", type=float, default=10.0, help="seconds the pages are left open")
    parser.add_argument("--repeat", type=int, default=2, help="rounds (the binaries in turns); the median is tabled")
    parser.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    args = parser.parse_args()
    args.executables = [e for e in args.executables.split(",") if e]
    if not args.executables:
        raise SystemExit(
            "no Chromium binary to measure: install chromium (and chromium-headless-shell) or pass --executables"
        )
    children: list[Any] = []
    site, origins = soak.start_site(children)
    try:
        rows = asyncio.run(measure(args, origins[0], {site.pid}))
    finally:
        site.terminate()
        with contextlib.suppress(Exception):
            site.communicate(timeout=15)
    table(rows)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
