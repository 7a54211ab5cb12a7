"""Cost of the navigation guard: the same browsing with and without request interception.

N sessions at once each do S steps on the local sites; a step is a click on a search result link
(a navigation: the document, its stylesheet, the favicon) followed by a screenshot, then back via
goto. Run once with no policy (no interception: the default for a local start URL) and once with
``allowed_domains = ["127.0.0.1"]`` (every request routed through Python, redirects through CDP
Fetch). Prints steps/s, requests routed, and CPU per step of this process and of Chromium.

    python benchmarks/guard_overhead.py --sessions 1,8 --steps 20
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from pathlib import Path

from playwright.async_api import async_playwright

from webagent.browser.guard import NavigationGuard
from webagent.browser.launcher import launch_browser
from webagent.browser.session import BrowserSession
from webagent.config import BrowserConfig
from webagent.images import frame_for
from webagent.safety import NavigationPolicy
from webagent.testing.sites import SiteServer


def _cpu_of(pids: list[int]) -> float:
    total = 0.0
    tick = os.sysconf("SC_CLK_TCK")
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])) / tick
        except (OSError, IndexError, ValueError):
            continue
    return total


def _chromium_pids() -> list[int]:
    me = os.getpid()
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
                cmd = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if b"chrom" in cmd and _is_descendant(int(entry.name), me, stat):
                out.append(int(entry.name))
    return out


def _is_descendant(pid: int, ancestor: int, stat: str) -> bool:
    for _ in range(10):
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == ancestor:
            return True
        if ppid <= 1:
            return False
        try:
            stat = Path(f"/proc/{ppid}/stat").read_text()
        except OSError:
            return False
    return False


async def run(site: SiteServer, n: int, steps: int, guarded: bool) -> dict[str, float]:
    config = BrowserConfig()
    frame = frame_for(config.viewport.width, config.viewport.height, None)
    async with async_playwright() as playwright:
        browser = await launch_browser(playwright, config)
        policy = NavigationPolicy.build(allowed=["127.0.0.1"] if guarded else [], start_url=site.url)
        sessions = []
        for _ in range(n):
            session = await BrowserSession.create(browser, config, block_service_workers=policy.active)
            await session.set_guard(NavigationGuard(policy))
            await session.goto(site.url + "/catalog/search?q=widget", start=True)
            sessions.append(session)
        pids = _chromium_pids()
        cpu0, py0, t0 = _cpu_of(pids), time.process_time(), time.perf_counter()

        async def drive(session: BrowserSession) -> None:
            for _ in range(steps):
                await session.click(650, 242)  # first search result: a navigation
                await session.screenshot(frame)
                await session.goto(site.url + "/catalog/search?q=widget")
                await session.screenshot(frame)

        await asyncio.gather(*(drive(s) for s in sessions))
        wall = time.perf_counter() - t0
        chrome_cpu, py_cpu = _cpu_of(pids) - cpu0, time.process_time() - py0
        routed = sum(s.guard.blocked_requests for s in sessions if s.guard)  # 0: nothing is off-limits here
        for session in sessions:
            await session.close()
        await browser.close()
    total = n * steps * 2
    return {
        "steps_per_s": total / wall,
        "ms_per_step": 1000 * wall * n / total,
        "py_cpu_ms": 1000 * py_cpu / total,
        "chrome_cpu_ms": 1000 * chrome_cpu / total,
        "blocked": routed,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", default="1,8", help="comma-separated N values")
    parser.add_argument("--steps", type=int, default=20, help="click+back rounds per session")
    args = parser.parse_args()
    with SiteServer() as site:
        for n in (int(x) for x in args.sessions.split(",")):
            rows = {g: asyncio.run(run(site, n, args.steps, g)) for g in (False, True)}
            off, on = rows[False], rows[True]
            print(
                f"N={n:<3} steps/s off {off['steps_per_s']:6.1f} on {on['steps_per_s']:6.1f} "
                f"({on['steps_per_s'] / off['steps_per_s'] - 1:+.0%})  ms/step off {off['ms_per_step']:.1f} "
                f"on {on['ms_per_step']:.1f}  python CPU ms/step off {off['py_cpu_ms']:.1f} on {on['py_cpu_ms']:.1f}  "
                f"chromium CPU ms/step off {off['chrome_cpu_ms']:.1f} on {on['chrome_cpu_ms']:.1f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
