"""Cost of the navigation guard: the same browsing with and without it.

N sessions at once each do S steps on the local sites; a step is a click on a search result link
(a navigation: the document, its stylesheet, the favicon) followed by a screenshot, then back via
goto. Run with no policy (no guard: the default for a local start URL), with a policy that judges
navigations only (the default for a public start URL: document requests paused), and with
``allowed_domains = ["127.0.0.1"]`` (every request paused and judged, the proxy net on). Guarded
sessions get a hardened browser, as the pool gives them. Prints steps/s and CPU per step of this
process and of Chromium; ``--no-direct-cdp`` measures the guard without the direct DevTools
connection (what an agent with secrets gets).

    python benchmarks/guard_overhead.py --sessions 1,20 --steps 10
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import time
from pathlib import Path

from playwright.async_api import async_playwright

from webagent.browser.guard import NavigationGuard
from webagent.browser.launcher import launch_browser
from webagent.browser.session import BrowserSession
from webagent.config import BrowserConfig
from webagent.errors import ActionError
from webagent.guard.navigation import NavigationPolicy, parse_rules
from webagent.images import frame_for
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


def _policy(mode: str, site: SiteServer) -> NavigationPolicy:
    if mode == "every":
        return NavigationPolicy.build(allowed=["127.0.0.1"], start_url=site.url)
    if mode == "navigations":  # as for a public start URL, with the local site let through
        return NavigationPolicy(blocked=parse_rules(["blocked.invalid"]), every_request=False)
    return NavigationPolicy.build(start_url=site.url)


async def run(site: SiteServer, n: int, steps: int, mode: str, direct: bool) -> dict[str, float]:
    # Every mode on the binary a guarded browser gets (the full Chromium), so that the guard's cost is
    # not mixed with the headless shell's (which an unguarded browser would get).
    config = BrowserConfig(direct_cdp=direct, headless_shell=False)
    frame = frame_for(config.viewport.width, config.viewport.height, None)
    policy = _policy(mode, site)
    async with async_playwright() as playwright:
        browser = await launch_browser(playwright, config, hardened=policy.active)
        sessions = []
        for _ in range(n):
            guard = NavigationGuard(policy)
            session = await BrowserSession.create(browser, config, guard=guard)
            await session.set_guard(guard)
            await session.goto(site.url + "/catalog/search?q=widget", start=True)
            sessions.append(session)
        pids = _chromium_pids()
        cpu0, py0, t0 = _cpu_of(pids), time.process_time(), time.perf_counter()

        async def drive(session: BrowserSession) -> None:
            for _ in range(steps):
                await session.click(650, 242)  # first search result: a navigation
                await session.screenshot(frame)
                # On a loaded machine the click's navigation may still be under way and replace this one:
                # the step still counts (both sides alike).
                with contextlib.suppress(ActionError):
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
    parser.add_argument("--modes", default="off,navigations,every", help="off, navigations, every")
    parser.add_argument("--no-direct-cdp", action="store_true", help="without the direct DevTools connection")
    args = parser.parse_args()
    with SiteServer() as site:
        for n in (int(x) for x in args.sessions.split(",")):
            rows = {m: asyncio.run(run(site, n, args.steps, m, not args.no_direct_cdp)) for m in args.modes.split(",")}
            base = rows.get("off")
            for mode, row in rows.items():
                change = f"({row['steps_per_s'] / base['steps_per_s'] - 1:+.0%})" if base and mode != "off" else ""
                print(
                    f"N={n:<3} {mode:<12} steps/s {row['steps_per_s']:6.1f} {change:<7} ms/step {row['ms_per_step']:6.1f}  "
                    f"python CPU ms/step {row['py_cpu_ms']:5.1f}  chromium CPU ms/step {row['chrome_cpu_ms']:6.1f}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
