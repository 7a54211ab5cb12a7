"""Run in a process of its own by test_drivers.py (tracing is decided once per process, from the
``OTEL_*`` environment): a caller-driven RL episode (``WebEnv`` reset, step, close) and a pilot's
``check``, on the local catalog with the offline model server. Prints ``ok`` and the episode's reward."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from webagent import Agent, WebEnv
from webagent.testing.offline import load_local_tasks
from webagent.testing.server import FakeModelServer
from webagent.testing.sites import SiteServer

from ..conftest import load_task_script, make_config

WRITE = {"action": "write_element", "element": "catalog search box", "content": "blue widget", "press_enter": True}
CLICK = {"action": "click_element", "element": "first search result"}
STATEMENT = "The page shows the Blue Widget at $12.50"


async def main(out: Path) -> None:
    with SiteServer() as site:
        task = load_local_tasks(site.url)["catalog-price"]
        async with FakeModelServer(load_task_script("catalog-price")) as server:
            config = make_config(server)
            config.run.har = True  # the episode's own context records one; the pilot's caller's page none
            async with Agent(config) as agent:
                env = WebEnv(agent=agent)
                await env.reset(task, output_dir=out / "episode")
                await env.step({"action": WRITE})
                await env.step({"action": CLICK})
                _, reward, done, _, _ = await env.step({"action": "answer", "content": "$12.50"})
                await env.aclose()
                async with agent.browsers.session() as session:  # a page of the caller's own
                    await session.page.goto(f"{site.url}/catalog/product/blue-widget")
                    check = await agent.pilot(session.page, output_dir=out / "pilot").check(STATEMENT)
    print("ok", reward, done, check.holds)


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1])))
