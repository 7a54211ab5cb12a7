"""Browsers per Ray actor or one per node: the memory of ``--actors`` actors' sessions on one node.

A Ray actor (``webagent batch --ray``) launches its own Chromium; the alternative is one browser
pool per node that the node's actors share (``[browser] provider = "hosts"`` pointing at a
Chromium on the node). Both run the same sessions (``--sessions`` per actor, each a context with
the local catalog page open and one screenshot taken), so the difference is what a Chromium costs
beside its pages. Measured: the PSS of the Chromium processes (the Playwright driver left out: an
actor reaching a shared Chromium keeps its own driver, so it is the same either way), per mode,
``--rounds`` times alternating, and per session. PSS is load-independent; no timing is taken.

    python benchmarks/node_pool.py --actors 4 --sessions 4 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
from pathlib import Path

from playwright.async_api import Browser, async_playwright

from webagent.browser.launcher import launch_browser
from webagent.config import AgentConfig
from webagent.testing.sites import SiteServer


def chromium_pss_kib() -> int:
    """The PSS of this process's descendants that are Chromium processes."""
    parents: dict[int, int] = {}
    names: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                stat = Path(f"/proc/{entry}/stat").read_text()
                parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
                names[int(entry)] = stat[stat.index("(") + 1 : stat.rindex(")")]
    tree, todo = [], [os.getpid()]
    while todo:
        pid = todo.pop()
        kids = [c for c, p in parents.items() if p == pid]
        tree += kids
        todo += kids
    total = 0
    for pid in tree:
        if "chrom" not in names.get(pid, "") and "headless" not in names.get(pid, ""):
            continue
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
    return total


async def measure(browsers: int, sessions: int, url: str) -> int:
    """PSS (KiB) of ``browsers`` Chromiums with ``sessions`` sessions each, all open at once."""
    config = AgentConfig().browser
    async with async_playwright() as pw:
        launched: list[Browser] = [await launch_browser(pw, config) for _ in range(browsers)]
        try:
            for browser in launched:
                for _ in range(sessions):
                    page = await (await browser.new_context(viewport={"width": 1280, "height": 800})).new_page()
                    await page.goto(url)
                    await page.screenshot(type="jpeg", quality=85)
            await asyncio.sleep(1.0)
            return chromium_pss_kib()
        finally:
            for browser in launched:
                await browser.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--actors", type=int, default=4)
    parser.add_argument("--sessions", type=int, default=4, help="sessions per actor")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    per_actor: list[int] = []
    per_node: list[int] = []
    with SiteServer() as site:
        url = site.url + "/catalog/"
        for _ in range(args.rounds):
            per_actor.append(await measure(args.actors, args.sessions, url))
            per_node.append(await measure(1, args.actors * args.sessions, url))
        one = await measure(1, 1, url)
    n = args.actors * args.sessions
    a, b = statistics.median(per_actor) / 1024, statistics.median(per_node) / 1024
    print(f"{args.actors} actors x {args.sessions} sessions ({n} sessions), median of {args.rounds} rounds:")
    print(f"  a Chromium per actor: {a:.0f} MiB ({a / n:.1f} MiB a session)  rounds {[x // 1024 for x in per_actor]}")
    print(f"  one Chromium a node:  {b:.0f} MiB ({b / n:.1f} MiB a session)  rounds {[x // 1024 for x in per_node]}")
    print(
        f"  saved by one a node: {a - b:.0f} MiB ({(a - b) / max(args.actors - 1, 1):.0f} MiB a Chromium not launched)"
    )
    print(f"  one Chromium, one session: {one / 1024:.0f} MiB")


if __name__ == "__main__":
    asyncio.run(main())
